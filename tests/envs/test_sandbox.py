"""The bubblewrap sandbox against real hostile programs: each one is stopped by its limit."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proctor.envs import Sandbox, SandboxLimits, load_environment
from proctor.errors import ConfigError, SandboxUnavailable
from tests.procs import PROCTOR

LIMITS = SandboxLimits(
    timeout_s=4.0, cpu_s=2, memory_mb=256, max_processes=16, max_output_bytes=4096, disk_mb=8
)
SLACK_S = 10.0
"""How long past its limit a stopped program may take to be reported (a loaded CI machine)."""


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(LIMITS, max_concurrent=2)


async def test_runs_code_with_output_exit_code_and_stdin(sandbox: Sandbox) -> None:
    code = "import sys\nprint(input()[::-1])\nprint('oops', file=sys.stderr)\nsys.exit(3)\n"
    result = await sandbox.run_python(code, stdin="olleh\n")
    assert result.stdout == "hello\n"
    assert result.stderr == "oops\n"
    assert result.exit_code == 3 and not result.ok
    assert not result.timed_out and not result.output_truncated
    record = result.to_record()
    assert record["type"] == "sandbox" and record["exit_code"] == 3


async def test_no_environment_variables_leak_in(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    result = await sandbox.run_python("import os; print(sorted(os.environ))")
    assert result.ok, result.stderr
    assert "OPENAI_API_KEY" not in result.stdout
    assert "sk-must-not-leak" not in result.stdout


async def test_refuses_network(sandbox: Sandbox) -> None:
    # A real server on the host's loopback: the sandbox has its own, so it cannot reach it.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(8)

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(server.accept())

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = f"""
import socket
for target in [("127.0.0.1", {port}), ("1.1.1.1", 80)]:
    try:
        socket.create_connection(target, timeout=2)
        print("connected", target)
    except OSError as e:
        print("refused", type(e).__name__)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolved")
except OSError:
    print("no dns")
"""
    result = await sandbox.run_python(code)
    server.close()
    thread.join()
    assert result.ok, result.stderr
    assert "connected" not in result.stdout and "resolved" not in result.stdout
    assert result.stdout.count("refused") == 2 and "no dns" in result.stdout
    assert accepted == []


async def test_refuses_writes_outside_its_private_dirs(sandbox: Sandbox, tmp_path: Path) -> None:
    host_file = tmp_path / "host.txt"
    host_file.write_text("untouched")
    code = f"""
import os
for path in ["/usr/evil", "/etc/evil", "/evil", "/bin/evil", {str(host_file)!r}]:
    try:
        with open(path, "w") as f:
            f.write("x")
        print("wrote", path)
    except OSError as e:
        print("refused", path, e.errno)
for path in ["/work/mine.txt", "/tmp/mine.txt"]:
    with open(path, "w") as f:
        f.write("ok")
print(sorted(os.listdir("/work")), os.getcwd())
"""
    result = await sandbox.run_python(code)
    assert result.ok, result.stderr
    assert "wrote" not in result.stdout
    assert result.stdout.count("refused") == 5
    assert "['main.py', 'mine.txt'] /work" in result.stdout
    assert host_file.read_text() == "untouched"
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()
    # Throwaway: the next sandbox starts from nothing.
    again = await sandbox.run_python("import os; print(os.listdir('/work'), os.listdir('/tmp'))")
    assert again.stdout == "['main.py'] []\n"


async def test_a_file_past_the_disk_limit_fails(sandbox: Sandbox) -> None:
    code = "open('/work/big', 'wb').write(b'x' * (64 << 20))"
    result = await sandbox.run_python(code)
    assert result.exit_code != 0 and not result.timed_out


async def test_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    code = """
import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError as e:
    print("fork refused after", children, e.errno)
"""
    result = await sandbox.run_python(code)
    assert result.exit_code == 0, result.stderr
    assert "fork refused after" in result.stdout
    children = int(result.stdout.split()[3])
    assert children < LIMITS.max_processes
    assert result.duration_s < LIMITS.timeout_s + SLACK_S


async def test_memory_over_the_limit_fails(sandbox: Sandbox) -> None:
    result = await sandbox.run_python(f"block = bytearray({4 * LIMITS.memory_mb} << 20)")
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr


async def test_infinite_loop_is_killed(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("while True:\n    pass\n")
    # The CPU limit (SIGKILL: exit 137) or the wall clock, whichever comes first.
    assert result.timed_out or result.exit_code == 137, result
    assert not result.ok
    assert result.duration_s < LIMITS.timeout_s + SLACK_S


async def test_sleeping_forever_times_out(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import time\nprint('start', flush=True)\ntime.sleep(600)")
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "start\n"
    assert result.duration_s < LIMITS.timeout_s + SLACK_S


async def test_output_flood_is_cut_off(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("while True:\n    print('x' * 100)\n")
    assert result.output_truncated and not result.timed_out and not result.ok
    assert len(result.stdout) == LIMITS.max_output_bytes


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)


def test_missing_bubblewrap_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there: no bwrap
    with pytest.raises(SandboxUnavailable, match=r"bubblewrap.*not on PATH.*never runs"):
        Sandbox().check()
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        load_environment("humaneval")
    assert issubclass(SandboxUnavailable, ConfigError)


def test_missing_bubblewrap_refuses_the_eval_before_it_starts(tmp_path: Path) -> None:
    ran = subprocess.run(
        [*PROCTOR, "eval", "humaneval", "--no-push", "-o", str(tmp_path / "out")],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        executable=sys.executable,
    )
    assert ran.returncode == 2, ran.stderr
    assert "bubblewrap" in ran.stderr and "unsandboxed" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()
