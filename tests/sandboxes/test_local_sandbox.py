"""The local sandbox backend drives real process groups."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from proctor.sandboxes.local import LocalSandbox
from proctor.sandboxes.sandbox import TRUNCATION_MARKER, SandboxHandle, SandboxSpec, SandboxState
from tests.sandboxes.helpers import exited
from tests.support.tools import missing, tool


def _spec(tmp_path: Path, command: str, **env: str) -> SandboxSpec:
    return SandboxSpec(
        evaluation_id="ev-1",
        command=command,
        env=dict(env),
        workdir=tmp_path / "work",
        log_path=tmp_path / "logs" / "sandbox.log",
    )


def test_runs_command_with_env_and_captures_output(tmp_path: Path) -> None:
    backend = LocalSandbox()
    os.environ["PROCTOR_TEST_LAUNCHER_SECRET"] = "launcher-only"
    try:
        handle = backend.start(
            _spec(
                tmp_path,
                'echo "id=$EVALUATION_ID key=$MY_KEY l=${PROCTOR_TEST_LAUNCHER_SECRET:-}"; '
                "pwd; echo oops >&2",
                MY_KEY="s3cret",
            )
        )
    finally:
        del os.environ["PROCTOR_TEST_LAUNCHER_SECRET"]
    state = exited(backend, handle)
    assert state == SandboxState(running=False, exit_code=0)
    logs = backend.logs(handle)
    # The spec's env reaches the command; the launcher's own variables do not.
    assert "id=ev-1 key=s3cret l=\n" in logs
    assert str(tmp_path / "work") in logs
    assert "oops" in logs


def test_exit_code_is_reported(tmp_path: Path) -> None:
    backend = LocalSandbox()
    handle = backend.start(_spec(tmp_path, "echo bye; exit 3"))
    assert exited(backend, handle).exit_code == 3


def test_the_sandbox_log_is_readable_by_the_server_only(tmp_path: Path) -> None:
    backend = LocalSandbox()
    handle = backend.start(_spec(tmp_path, "echo private"))
    exited(backend, handle)
    assert (tmp_path / "logs" / "sandbox.log").stat().st_mode & 0o077 == 0


def test_readopted_sandbox_reports_exit_code_from_a_new_backend(tmp_path: Path) -> None:
    first = LocalSandbox()
    handle = first.start(_spec(tmp_path, "sleep 0.5; exit 7"))
    # A fresh backend (a restarted launcher) is not the parent: it sees the pid, then the file.
    second = LocalSandbox()
    restored = SandboxHandle.from_token("local", handle.token(), log_path=handle.log_path)
    assert second.adoptable(restored)
    assert second.poll(restored).running
    first.poll(handle)  # the original parent reaps its child, as a dying launcher's init would
    deadline = time.monotonic() + 20
    while second.poll(restored).running and time.monotonic() < deadline:
        first.poll(handle)
        time.sleep(0.05)
    assert second.poll(restored).exit_code == 7
    assert not second.adoptable(restored)


def test_a_reused_pid_is_not_adopted(tmp_path: Path) -> None:
    backend = LocalSandbox()
    me = psutil.Process(os.getpid())
    # Our own pid with a different start time stands in for a pid the OS gave to someone else.
    stale = SandboxHandle(backend="local", ref=str(me.pid), started_at=me.create_time() - 100)
    assert not backend.adoptable(stale)
    state = backend.poll(stale)
    assert not state.running and state.exit_code is None and state.detail


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    backend = LocalSandbox()
    # A grandchild that ignores SIGTERM: only the group SIGKILL after the grace reaches it.
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    handle = backend.start(_spec(tmp_path, f"{sys.executable} -c '{script}' & wait"))
    pid = int(handle.ref)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        members = [p for p in psutil.process_iter() if _pgid(p.pid) == pid]
        if len(members) >= 2:
            break
        time.sleep(0.05)
    assert len(members) >= 2
    backend.stop(handle, grace_seconds=0.5)
    alive = [p for p in psutil.process_iter() if _pgid(p.pid) == pid and p.status() != "zombie"]
    assert alive == []
    state = backend.poll(handle)
    assert not state.running


def test_logs_are_cut_to_a_tail_with_a_marker(tmp_path: Path) -> None:
    backend = LocalSandbox()
    handle = backend.start(
        _spec(tmp_path, "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done")
    )
    exited(backend, handle)
    full = backend.logs(handle)
    assert full.startswith("line-0\n") and full.endswith("line-1999\n")
    tail = backend.logs(handle, tail_bytes=100)
    assert tail.startswith(TRUNCATION_MARKER.split("{")[0])
    assert tail.endswith("line-1999\n")
    assert "line-0\n" not in tail
    assert len(tail) < 200


def test_bwrap_isolation_runs_the_command(tmp_path: Path) -> None:
    bwrap = tool("bwrap")
    if subprocess.run([bwrap, "--ro-bind", "/", "/", "true"], capture_output=True).returncode:
        missing("bubblewrap cannot create namespaces on this machine")
    backend = LocalSandbox(isolation="bwrap")
    spec = _spec(tmp_path, "cat eval.toml; echo inside > here.txt; cat here.txt; touch /etc/nope")
    handle = backend.start(dataclasses.replace(spec, files={"eval.toml": 'env = "e"\n'}))
    state = exited(backend, handle)
    logs = backend.logs(handle)
    assert "inside" in logs
    assert 'env = "e"' in logs  # its files, written into its own work dir
    assert state.exit_code != 0  # the root is read-only inside the sandbox


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_killed_wrapper_takes_its_whole_process_tree_with_it(tmp_path: Path) -> None:
    # Unconfined, so the grandchild's pid is the host's (a confined one has its own pid
    # namespace, which dies with the sandbox's bubblewrap: see
    # tests/server/hosted/test_confinement.py).
    backend = LocalSandbox(isolation="none")
    pid_file = tmp_path / "child.pid"
    # The "eval": a grandchild that would keep running (and calling the model) on its own.
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    handle = backend.start(_spec(tmp_path, f'{sys.executable} -c "{script}" & wait'))
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.05)
    child = psutil.Process(int(pid_file.read_text()))
    os.kill(int(handle.ref), 9)  # the wrapper dies; its child is orphaned
    state = exited(backend, handle)
    assert not state.running
    child.wait(timeout=10)  # gone with it
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_secret_headers_reach_the_sandbox_only_through_its_environment(tmp_path: Path) -> None:
    from proctor.sandboxes.command import (
        CONFIG_FILE,
        HostedEvalConfig,
        build_command,
        eval_toml,
        secret_environment,
    )

    secret = "Bearer sk-very-secret-0123456789"
    config = HostedEvalConfig(headers=[f"Authorization: {secret}", "X-Team: a"])
    config_file = eval_toml(config, environment="alphabet-sort", model="demo")
    assert secret not in config_file
    # The launcher's command, run for real; every process's command line is read meanwhile.
    command = build_command(
        "sleep 3; cat {config}", environment="alphabet-sort", model="demo", config=config
    )
    backend = LocalSandbox()
    env = secret_environment(config)
    spec = _spec(
        tmp_path,
        f"{command} > headers.txt; printf '\\n%s\\n' \"$PROCTOR_CLIENT_HEADERS\" >> headers.txt",
        **env,
    )
    handle = backend.start(dataclasses.replace(spec, files={CONFIG_FILE: config_file}))
    time.sleep(0.5)
    leaked = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if secret.encode() in cmdline.read_bytes():
                leaked.append(cmdline)
        except OSError:
            continue
    assert leaked == []
    assert exited(backend, handle).exit_code == 0
    written = (tmp_path / "work" / "headers.txt").read_text()
    assert 'headers_var = "PROCTOR_CLIENT_HEADERS"' in written
    assert json.loads(written.splitlines()[-1])["Authorization"] == secret


def test_the_eval_reads_headers_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from proctor.models.config import ClientConfig

    monkeypatch.setenv("PROCTOR_CLIENT_HEADERS", '{"Authorization": "Bearer x"}')
    client = ClientConfig(headers={"X-Team": "a"}, headers_var="PROCTOR_CLIENT_HEADERS")
    assert client.all_headers() == {"X-Team": "a", "Authorization": "Bearer x"}


def test_a_sandbox_file_replaces_what_an_earlier_sandbox_left_and_follows_no_link(
    tmp_path: Path,
) -> None:
    from proctor.sandboxes.sandbox import place_files

    target = tmp_path / "outside.txt"
    target.write_text("keep")
    work = tmp_path / "work"
    work.mkdir()
    (work / "eval.toml").symlink_to(target)
    place_files(work, {"eval.toml": 'env = "e"\n'})
    assert not (work / "eval.toml").is_symlink()
    assert (work / "eval.toml").read_text() == 'env = "e"\n' and target.read_text() == "keep"
    with pytest.raises(ValueError, match="plain name"):
        place_files(work, {"../x": ""})
