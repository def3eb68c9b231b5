"""The confinement of hosted sandboxes (`proctor.sandboxes.confine`): refusals, the policy's
pieces, and a confined local sandbox's identity, view, network and caps.

tests/e2e/test_containment.py runs a hostile pushed environment through the real path.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from proctor.errors import ConfigError, SandboxError
from proctor.sandboxes import confine
from proctor.sandboxes.local import LocalSandbox
from proctor.sandboxes.relay import endpoints, hosts_file
from proctor.sandboxes.sandbox import SandboxSpec
from proctor.server.auth import service as auth
from proctor.server.db.session import Database
from proctor.server.hosted.launcher import Launcher
from proctor.server.hosted.settings import LauncherSettings
from tests.sandboxes.helpers import exited
from tests.server.hosted.test_launcher import _create, _record, _settings, _tick_until
from tests.support.tools import confinable


def test_a_host_that_cannot_confine_refuses_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(confine.os, "geteuid", lambda: 1000)
    problem = confine.host_problem()
    assert problem is not None and "root" in problem
    spec = SandboxSpec("ev-x", "true", workdir=tmp_path / "w", log_path=tmp_path / "l" / "log")
    with pytest.raises(SandboxError, match="it never runs unconfined") as refused:
        LocalSandbox().start(spec)
    assert str(refused.value).count(". ") == 0  # one sentence
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_uid_ranges_never_hold_root() -> None:
    assert confine.uid_range("2000-2009") == range(2000, 2010)
    for bad in ("0-10", "x", "10-5"):
        with pytest.raises(ValueError, match="PROCTOR_HOSTED_UIDS"):
            confine.uid_range(bad)
    with pytest.raises(ConfigError, match="PROCTOR_HOSTED_UIDS"):
        LauncherSettings.load(uids="0-100")


def test_endpoints_are_reached_where_their_urls_point() -> None:
    points = endpoints(
        [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/api",
            "https://api.example.com/v1",
            "http://localhost:9/v1",
        ]
    )
    first = points[0]
    assert (first.host, first.port, first.inside) == ("127.0.0.1", 8000, "127.0.0.1")
    named = points[1]
    assert (named.port, named.alias) == (443, "api.example.com")
    assert f"{named.inside} api.example.com" in hosts_file(points)
    assert points[2].inside == "127.0.0.1"
    with pytest.raises(ValueError, match="name its host"):
        endpoints(["http://10.1.2.3:8000"])


@pytest.mark.process
def test_a_confined_sandbox_has_its_own_uid_view_and_network(tmp_path: Path) -> None:
    confinable()
    allowed = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    allowed_port, other_port = allowed.getsockname()[1], other.getsockname()[1]
    (tmp_path / "secret.txt").write_text("host only")
    secret_path = str(tmp_path / "secret.txt")
    probe = (
        "import os, socket\n"
        "print('uid', os.getuid(), os.geteuid())\n"
        f"for port in ({allowed_port}, {other_port}):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=3).close()\n"
        "        print('port', port, 'open')\n"
        "    except OSError:\n"
        "        print('port', port, 'closed')\n"
        f"for path in ({secret_path!r}, '/etc/shadow', '/proc/1/environ'):\n"
        "    try:\n"
        "        open(path).read(); print('read', path)\n"
        "    except OSError:\n"
        "        print('refused', path)\n"
        "print('env', sorted(k for k in os.environ if 'LAUNCHER' in k))\n"
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "probe.py").write_text(probe)
    backend = LocalSandbox(uids="2101000-2101099")
    os.environ["PROCTOR_TEST_LAUNCHER_ONLY"] = "launcher"
    try:
        handle = backend.start(
            SandboxSpec(
                "ev-confined",
                "python3 probe.py",
                workdir=tmp_path / "work",
                log_path=tmp_path / "box" / "sandbox.log",
                endpoints=(f"http://127.0.0.1:{allowed_port}/v1",),
                hidden=(tmp_path,),
            )
        )
        state = exited(backend, handle)
    finally:
        del os.environ["PROCTOR_TEST_LAUNCHER_ONLY"]
        allowed.close()
        other.close()
    log = backend.logs(handle)
    assert state.exit_code == 0, log
    uid = int(log.split("uid ")[1].split()[0])
    assert uid in range(2101000, 2101100) and f"uid {uid} {uid}" in log
    assert f"port {allowed_port} open" in log and f"port {other_port} closed" in log
    assert f"refused {tmp_path / 'secret.txt'}" in log
    assert "refused /etc/shadow" in log and "refused /proc/1/environ" in log
    assert "env []" in log
    assert not (tmp_path / "box" / "env.json").exists()  # read and removed at once
    assert (tmp_path / "work").stat().st_uid == uid


@pytest.mark.process
def test_memory_past_the_cap_ends_the_sandbox_with_the_reason(tmp_path: Path) -> None:
    confinable()
    backend = LocalSandbox(limits=confine.Limits(memory_mb=128, tmpfs_mb=512))
    handle = backend.start(
        SandboxSpec(
            "ev-memory",
            "head -c 400M /dev/zero > /dev/shm/fill; echo survived",
            workdir=tmp_path / "work",
            log_path=tmp_path / "box" / "sandbox.log",
        )
    )
    state = exited(backend, handle)
    log = backend.logs(handle)
    assert state.exit_code == confine.MEMORY_LIMIT, log
    assert "reached its memory limit of 128 MiB" in log and "survived" not in log


def test_unconfined_sandboxes_are_refused_on_a_server_with_two_users(
    db: Database, tmp_path: Path
) -> None:
    with db.write() as session:
        auth.create_key(session, name="second-user")
    evaluation_id = _create(db)
    launcher = Launcher(
        db,
        _settings(command="true", isolation="none"),
        api_url="http://127.0.0.1:9",
        data_dir=tmp_path,
    )
    _tick_until(launcher, lambda: _record(db, evaluation_id)[0].status == "FAILED")
    message = _record(db, evaluation_id)[0].error_message or ""
    assert "PROCTOR_HOSTED_ISOLATION=none is refused" in message, message
