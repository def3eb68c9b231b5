"""A hostile pushed environment, run hosted with the default settings, is contained.

A plain user (no team, no admin) pushes with `proctor envs push` a package whose loader
probes the host, and runs it with `proctor hosted run`. Each probe succeeds on an
unconfined sandbox (uid 0 on the server host) and must fail in a confined one: reading
`/etc/shadow`, the server's database, data dir and quickstart config, a file under `/root`,
another sandbox's log and every `/proc/*/environ`; writing the shared venv cache and the
package's own installed files; connecting to PostgreSQL and to an unrelated loopback
listener; a fork bomb past the process cap; then memory past the cap through forks and
`/dev/shm`, which ends the run FAILED with the reason.

CI runs as root with bubblewrap: a host that cannot confine fails this test, never skips it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.e2e.hosted_helpers import hub_project, wait_closed
from tests.e2e.test_hub import make_key, proctor
from tests.support.platform import Platform, postgres_url, start_platform
from tests.support.tools import confinable

from proctor.sandboxes.confine import uid_range

pytestmark = pytest.mark.e2e

UIDS = "2100000-2100999"
MEMORY_MB = 448  # room for the eval and its probes; the memory probe asks for 1 GiB

HOSTILE = '''"""A hostile environment: its loader probes the host first."""

from __future__ import annotations

import glob
import contextlib
import json
import os
import socket
import time

from proctor.envs import SingleTurnEnv, Task, Taskset, reward

TARGETS = {targets!r}


def _read(path):
    try:
        with open(path, "rb") as f:
            return "READ " + repr(f.read(64))
    except OSError as e:
        return "refused " + type(e).__name__


def _listdir(path):
    try:
        return "LISTED " + repr(sorted(os.listdir(path))[:5])
    except OSError as e:
        return "refused " + type(e).__name__


def _write(path):
    try:
        with open(path, "w") as f:
            f.write("poisoned")
        return "WROTE"
    except OSError as e:
        return "refused " + type(e).__name__


def _connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        return "CONNECTED"
    except OSError as e:
        return "refused " + type(e).__name__


def _environ():
    leaked = []
    for path in glob.glob("/proc/*/environ"):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if TARGETS["secret"].encode() in data or TARGETS["bootstrap"].encode() in data:
            leaked.append(path)
    return "LEAKED " + repr(leaked) if leaked else "none"


def _fork_bomb():
    children = []
    try:
        for _ in range(TARGETS["forks"]):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
    except OSError:
        pass
    for pid in children:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return len(children)


def _exhaust_memory():
    for _ in range(8):
        if os.fork() == 0:
            block = bytearray(100 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(60)
            os._exit(0)
    try:
        with open("/dev/shm/fill", "wb") as f:
            for _ in range(200):
                f.write(b"x" * (1 << 20))
    except OSError:
        pass
    time.sleep(60)


def probe():
    import tiny_echo

    found = {{
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "shadow": _read("/etc/shadow"),
        "database": _read(TARGETS["database"]),
        "data_dir": _listdir(TARGETS["data_dir"]),
        "config": _read(TARGETS["config"]),
        "root_file": _read(TARGETS["root_file"]),
        "other_log": _read(TARGETS["other_log"]),
        "environ": _environ(),
        "venv_cache": _write(os.path.join(TARGETS["venvs"], "poison.txt")),
        "own_package": _write(os.path.join(os.path.dirname(tiny_echo.__file__), "poison.py")),
        "postgres": _connect(TARGETS["postgres"]),
        "listener": _connect(TARGETS["listener"]),
        "forks": _fork_bomb(),
    }}
    with open("probes.json", "w") as f:
        json.dump(found, f)
    print("PROBES " + json.dumps(found), flush=True)  # (a Ray job's work dir is not kept)
    _exhaust_memory()


@reward(weight=1.0)
def echoed(response: str, answer: str) -> float:
    return 1.0 if answer in response.lower() else 0.0


def load_environment(**kwargs) -> SingleTurnEnv:
    probe()
    return SingleTurnEnv(
        name="tiny-echo",
        description="hostile",
        taskset=Taskset([Task(index=0, prompt="Repeat: apple", answer="apple")]),
        rubric=[echoed],
    )
'''


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """A platform with the default isolation, small caps for the probes to hit."""
    confinable()
    data_dir = tmp_path_factory.mktemp("confined-platform")
    empty_index = tmp_path_factory.mktemp("empty-index")
    env = {
        "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
        "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
        "PROCTOR_HOSTED_PACKAGE_INDEX": empty_index.as_uri(),
        "PROCTOR_HOSTED_UIDS": UIDS,
        "PROCTOR_HOSTED_MEMORY_MB": str(MEMORY_MB),
        "PROCTOR_HOSTED_PIDS": "64",
    }
    plat = start_platform(data_dir, extra_env=env)
    # What `proctor quickstart` leaves in a data dir: the admin key in config.toml.
    (data_dir / "config.toml").write_text(f'api_key = "{plat.api_key}"\n')
    yield plat
    plat.process.stop()


def _listener() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.listen(8)
    return sock


@contextlib.contextmanager
def hostile_targets(data_dir: Path, other_log: Path, admin_key: str) -> Iterator[dict[str, object]]:
    """What the hostile package probes, set up on the host (and removed after)."""
    listener = _listener()
    pg = postgres_url()
    pg_port = urlsplit(pg).port if pg else None
    pg_stand_in = None if pg_port else _listener()
    root_file = Path("/root") / f"proctor-containment-{os.getpid()}-{time.time_ns()}"
    secret = f"victim-secret-{os.getpid()}-{time.time_ns()}"
    victim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        env={**os.environ, "VICTIM_SECRET": secret},
    )
    root_file.write_text("root only\n")
    root_file.chmod(0o600)
    try:
        yield {
            "database": str(data_dir / "proctor.db"),
            "data_dir": str(data_dir),
            "config": str(data_dir / "config.toml"),
            "root_file": str(root_file),
            "other_log": str(other_log),
            "venvs": str(data_dir / "hosted-venvs"),
            "postgres": pg_port or pg_stand_in.getsockname()[1],  # type: ignore[union-attr]
            "listener": listener.getsockname()[1],
            "secret": secret,
            "bootstrap": admin_key,
            "forks": 200,
        }
    finally:
        victim.kill()
        victim.wait()
        root_file.unlink(missing_ok=True)
        listener.close()
        if pg_stand_in is not None:
            pg_stand_in.close()


def hostile_project(tmp_path: Path, targets: dict[str, object]) -> Path:
    """The hostile package's project folder (`hostile-echo`), probing `targets`."""
    folder = hub_project(tmp_path, name="hostile-echo")
    (folder / "tiny_echo" / "__init__.py").write_text(HOSTILE.format(targets=targets))
    return folder


def probes_of(logs: str) -> dict[str, object] | None:
    """The probes' findings, as the hostile package printed them."""
    for line in logs.splitlines():
        if line.startswith("PROBES "):
            return dict(json.loads(line.removeprefix("PROBES ")))
    return None


def assert_contained(probes: dict[str, Any], record: dict[str, Any], uids: str) -> None:
    """Every probe failed, and memory past the cap ended the run with the reason."""
    # Its own unprivileged uid: neither root nor the server's, from the configured range.
    assert probes["uid"] == probes["euid"]
    assert probes["uid"] not in (0, os.getuid()) and probes["uid"] in uid_range(uids)
    for name in ("shadow", "database", "data_dir", "config", "root_file", "other_log"):
        assert probes[name].startswith("refused"), (name, probes[name])
    assert probes["environ"] == "none", probes["environ"]
    assert probes["venv_cache"].startswith("refused"), probes["venv_cache"]
    assert probes["own_package"].startswith("refused"), probes["own_package"]
    assert probes["postgres"].startswith("refused"), probes["postgres"]
    assert probes["listener"].startswith("refused"), probes["listener"]
    assert probes["forks"] < 64, probes["forks"]  # stopped at the process cap
    # Memory past the cap (forks and /dev/shm) ends the run, with the reason.
    assert record["status"] == "FAILED", record
    assert record["error_message"].startswith(
        f"the sandbox reached its memory limit of {MEMORY_MB} MiB"
    ), record["error_message"]


def test_a_hostile_pushed_environment_is_contained(
    confined: Platform, demo_model: str, tmp_path: Path
) -> None:
    data_dir = Path(confined.data_dir)
    mallory = make_key(confined, "mallory")
    # Another tenant's sandbox, to read the log of: a finished run of a built-in.
    other = proctor(
        confined, confined.api_key, "hosted", "run", "alphabet-sort", "-m", "demo",
        "--api-base-url", demo_model, "-n", "1", "-r", "1",
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    other_id = other.stdout.strip().splitlines()[-1]
    wait_closed(confined.client(), confined, other_id)
    other_log = data_dir / "sandboxes" / other_id / "sandbox.log"
    assert other_log.is_file()

    with hostile_targets(data_dir, other_log, confined.api_key) as targets:
        pushed = proctor(confined, mallory, "envs", "push", str(hostile_project(tmp_path, targets)))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        run = proctor(
            confined, mallory, "hosted", "run", "hostile-echo", "-m", "demo",
            "--api-base-url", demo_model, "-n", "1", "-r", "1",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        evaluation_id = run.stdout.strip().splitlines()[-1]
        record = wait_closed(confined.client(mallory), confined, evaluation_id, timeout=180)

    probes_file = data_dir / "sandboxes" / evaluation_id / "work" / "probes.json"
    logs = confined.client(mallory).get(f"/hosted-evaluations/{evaluation_id}/logs").text
    assert probes_file.is_file(), f"the probes never ran: {record}\n{logs}"
    assert_contained(json.loads(probes_file.read_text()), record, UIDS)
    assert not list((data_dir / "hosted-venvs").glob("*/poison*"))
