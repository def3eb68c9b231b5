"""The bubblewrap sandbox against real hostile programs: each one is stopped by its limit."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proctor.envs import Sandbox, SandboxLimits, _cgroup, load_environment
from proctor.errors import ConfigError, SandboxUnavailable
from tests.support.procs import PROCTOR
from tests.support.tools import require

# Every test runs code in the sandbox, a process of its own (`Sandbox.run` does not name one).
pytestmark = pytest.mark.process

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


SECRETS = {"OPENAI_API_KEY": "sk-openai-must-not-leak", "PROCTOR_API_KEY": "pk-must-not-leak"}


async def test_model_written_code_finds_no_secret_in_any_process_it_can_see(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The eval's keys are in proctor's environment; the program looks where a hostile one
    # would: its own environ, the sandbox's PID 1 (bubblewrap's) and every other process.
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    code = """
import os
pids = ["1", "self"] + sorted(p for p in os.listdir("/proc") if p.isdigit())
for pid in pids:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            print("environ", pid, f.read().replace(b"\\0", b" ").decode(errors="replace"))
    except OSError as e:
        print("unreadable", pid, e.errno)
"""
    result = await sandbox.run_python(code)
    assert result.ok, result.stderr
    # The probe did read the processes it names (a failed probe would prove nothing).
    assert "environ 1 " in result.stdout and "environ self PATH=" in result.stdout
    for name, value in SECRETS.items():
        assert value not in result.stdout and name not in result.stdout


HOSTILE_MEMORY = r"""
import os, signal, time
MiB = 1 << 20
PLAN = [("shm", 150)] + [("mem", 48)] * 6
def child(job, mib, w):
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # the OOM killer takes these before their parent
    held, blocks = 0, []
    try:
        if job == "shm":
            with open("/dev/shm/fill", "wb") as f:
                while held < mib * MiB:
                    f.write(b"s" * MiB)
                    f.flush()
                    held += MiB
        else:
            while held < mib * MiB:
                blocks.append(bytearray(b"m" * MiB))
                held += MiB
    except (OSError, MemoryError):
        pass
    os.write(w, b"%d\n" % held)
    time.sleep(60)
    os._exit(0)
kids = []
for job, mib in PLAN:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(job, mib, w)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        line = f.readline()
    kids.append((pid, job, int(line) if line.strip() else 0))
held = 0
for pid, job, n in kids:
    if job == "shm":
        continue
    if os.waitpid(pid, os.WNOHANG) == (0, 0):
        held += n
try:
    held += os.path.getsize("/dev/shm/fill")
except OSError:
    pass
print("intended_mib", sum(m for _, m in PLAN), "held_mib", held // MiB, flush=True)
for pid, _, _ in kids:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
"""Forks children that each hold 48 MiB, after one that fills `/dev/shm` with 150 MiB (438 MiB
meant in all); children report what they hold once they hold it, so the parent, which
allocates nothing itself, sums what is held at once by processes still alive plus the
tmpfs file (whose pages belong to no process)."""


async def test_forks_and_dev_shm_together_stay_under_the_sandbox_memory_cap() -> None:
    require(None if _cgroup.available() else "no cgroup can be made here (not root)")
    limits = SandboxLimits(
        timeout_s=30.0,
        cpu_s=20,
        memory_mb=96,
        max_processes=16,
        max_output_bytes=4096,
        disk_mb=160,
    )
    result = await Sandbox(limits, max_concurrent=1).run_python(HOSTILE_MEMORY)
    assert not result.timed_out, result
    words = result.stdout.split()
    assert words[:2] == ["intended_mib", "438"], (result.stdout, result.stderr)
    held = int(words[3])
    assert held < limits.memory_mb, result.stdout


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
