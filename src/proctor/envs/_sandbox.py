"""Running model-written code in a throwaway bubblewrap sandbox.

Every `Sandbox.run()` starts a fresh `bwrap` process tree and throws it away afterwards:

- no network: its own network namespace, with nothing but its own loopback;
- a read-only system: `/usr` (and the interpreter's prefix) bound read-only, the root
  remounted read-only, no `/home`, no `/etc` beyond the linker cache;
- a private, writable `/work` (the working directory, holding the given files) and `/tmp`,
  both size-limited tmpfs that vanish with the sandbox;
- no inherited environment variables (API keys stay outside): bubblewrap itself starts
  from an empty environment, so no process the program can see, not even the sandbox's
  PID 1 (`/proc/1/environ`), holds more than the few variables set below;
- its own PID, IPC and UTS namespaces, no capabilities, a new session (no terminal
  injection);
- one memory cap for the whole sandbox, its processes and the files it writes to its tmpfs
  (`/work`, `/tmp`, a size-capped `/dev/shm`) together, and a process cap: a cgroup of its
  own (`_cgroup.py`), where proctor may make one (as root, or in a delegated cgroup v2);
- rlimits set with `prlimit` inside the sandbox: CPU seconds, address space, processes,
  file size. The wall-clock timeout and the output cap are enforced here; either one kills
  the whole sandbox.

There is no fallback. Where bubblewrap is missing or cannot create its namespaces, `check()`
and `run()` raise `SandboxUnavailable`: proctor never runs such code unsandboxed.

As root, the sandbox runs as `nobody` (uid 65534): the kernel exempts root from the process
limit, and nothing in the sandbox needs privileges. The process limit is counted inside the
sandbox's own user namespace (Linux 5.14 and later), so concurrent sandboxes do not share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proctor.envs._cgroup import SandboxCgroup
from proctor.errors import SandboxUnavailable

logger = logging.getLogger(__name__)

NOBODY = 65534
"""The uid and gid sandboxes run as when proctor runs as root."""
_NEVER_UNSANDBOXED = "proctor never runs model-written code unsandboxed"
_BWRAP_MESSAGE = "bwrap: "
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_CGROUP_FAILED = 125
"""Exit status of the sandbox's first process when it could not join its cgroup."""
_JOIN_CGROUP = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    'echo $$ > "$1" || { echo "proctor: cannot join the cgroup $1" >&2; exit 125; }; '
    'shift; n=$((n - 1)); done; exec "$@"'
)
"""The sandbox's first process: join its cgroup(s), then become bubblewrap; everything the
sandbox starts is counted from its first page on."""
_CLEAN_ENVIRONMENT: dict[str, str] = {}
"""What bubblewrap itself is started with: nothing (its PID 1 is visible to the program)."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What one execution may use; every limit applies to each sandbox on its own."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole sandbox is killed (`timed_out`)."""
    cpu_s: int = 10
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL)."""
    memory_mb: int = 512
    """Memory in MiB of the whole sandbox, its processes and its tmpfs files together (its
    cgroup: past it the kernel kills one of its processes), and the address space of each
    process (RLIMIT_AS: allocations past it fail)."""
    max_processes: int = 32
    """Processes and threads alive at once inside the sandbox (RLIMIT_NPROC, and its
    cgroup's pids.max)."""
    max_output_bytes: int = 64 * 1024
    """Bytes kept of stdout and of stderr each; more kills the sandbox (`output_truncated`)."""
    disk_mb: int = 64
    """Size of `/work`, of `/tmp` and of `/dev/shm` (tmpfs) in MiB each; also the largest
    file (RLIMIT_FSIZE). Their pages count toward `memory_mb` too."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_mb", "max_processes", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be positive")
        if self.disk_mb < 1:
            raise ValueError("sandbox limit disk_mb must be at least 1")


@dataclass(slots=True)
class ExecutionResult:
    """What one sandboxed execution did."""

    stdout: str
    stderr: str
    exit_code: int | None
    """The program's exit status (128+N when signal N killed it); None when proctor killed
    the sandbox (timeout or output cap)."""
    timed_out: bool
    """The wall-clock timeout killed it."""
    output_truncated: bool
    """It wrote more than the output cap; what was kept is in stdout/stderr."""
    duration_s: float
    """Wall time from the sandbox's start to its end."""

    @property
    def ok(self) -> bool:
        """Exited 0, within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated

    def to_record(self) -> dict[str, Any]:
        """JSON-ready form, as recorded in an episode's trajectory (`type: "sandbox"`)."""
        return {
            "type": "sandbox",
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "output_truncated": self.output_truncated,
            "duration_s": self.duration_s,
        }


_probed: dict[tuple[str, ...], str | None] = {}
"""Result of the one start-up probe per bwrap/uid/prefix: None when it worked, else why not."""


class Sandbox:
    """Runs programs in fresh bubblewrap sandboxes, at most `max_concurrent` at once.

    Args:
        limits: What each execution may use.
        max_concurrent: Sandboxes running at once (default: the number of CPUs), so that
            a burst of rollouts queues here instead of starving each other's timeouts.
        python: The interpreter `run_python` uses (default: the system's `python3`, else
            the one running proctor); it must be readable by the sandbox's user.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        max_concurrent: int | None = None,
        python: str | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.max_concurrent = max_concurrent or os.cpu_count() or 1
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        # The system interpreter lives under the read-only /usr; proctor's own may sit in a
        # home directory the sandbox's user cannot read.
        found = python or shutil.which("python3", path=SYSTEM_PATH) or sys.executable
        self.python = os.path.realpath(found)

    # --- isolation check ---------------------------------------------------------------

    def _tools(self) -> tuple[str, str]:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailable(
                "running model-written code needs bubblewrap, and `bwrap` is not on PATH; "
                f"install it (e.g. `apt-get install bubblewrap`): {_NEVER_UNSANDBOXED}."
            )
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            raise SandboxUnavailable(
                "the sandbox sets its limits with prlimit, and `prlimit` is not on PATH; "
                f"install util-linux: {_NEVER_UNSANDBOXED}."
            )
        return os.path.realpath(bwrap), os.path.realpath(prlimit)

    def check(self) -> None:
        """Make sure sandboxes can start here (once per process; cheap after that).

        Raises:
            SandboxUnavailable: bubblewrap or prlimit is missing, or bubblewrap cannot
                create its namespaces (the message names the fix).
        """
        bwrap, prlimit = self._tools()
        key = (bwrap, prlimit, str(os.geteuid()), self.python)
        if key not in _probed:
            _probed[key] = self._probe(bwrap, prlimit)
        reason = _probed[key]
        if reason is not None:
            raise SandboxUnavailable(reason)

    def _probe(self, bwrap: str, prlimit: str) -> str | None:
        argv = self._argv(bwrap, prlimit, [], [self.python, "-c", "pass"])
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                env=_CLEAN_ENVIRONMENT,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap could not be started ({e}): {_NEVER_UNSANDBOXED}."
        if done.returncode == 0:
            return None
        detail = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        return (
            f"bubblewrap cannot start a sandbox here ({detail}); allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces "
            f"> 0) and make {self.python} readable by everyone: {_NEVER_UNSANDBOXED}."
        )

    # --- running -------------------------------------------------------------------------

    async def run_python(self, code: str, *, stdin: str | None = None) -> ExecutionResult:
        """Run `code` as `/work/main.py` with this interpreter (standard library only)."""
        return await self.run({"main.py": code}, [self.python, "main.py"], stdin=stdin)

    async def run(
        self,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        *,
        stdin: str | None = None,
    ) -> ExecutionResult:
        """Put `files` (name -> content) in `/work` and run `command` there.

        Raises:
            SandboxUnavailable: the sandbox cannot start here (never run unsandboxed).
        """
        bwrap, prlimit = self._tools()
        self.check()
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            # One semaphore per event loop: an environment may outlive the loop it first ran in.
            self._slots = (loop, asyncio.Semaphore(self.max_concurrent))
        async with self._slots[1]:
            return await self._run(bwrap, prlimit, files, command, stdin)

    async def _run(
        self,
        bwrap: str,
        prlimit: str,
        files: Mapping[str, str | bytes],
        command: Sequence[str],
        stdin: str | None,
    ) -> ExecutionResult:
        fds: list[tuple[int, str]] = []
        try:
            for name, content in files.items():
                if not name or "/" in name or name in (".", ".."):
                    raise ValueError(f"sandbox file names are plain names, not {name!r}")
                fd = os.memfd_create(name)
                data = content.encode() if isinstance(content, str) else content
                os.write(fd, data)
                os.lseek(fd, 0, os.SEEK_SET)
                fds.append((fd, name))
            argv = self._argv(bwrap, prlimit, fds, list(command))
            cgroup = SandboxCgroup.create(
                self.limits.memory_mb << 20, self.limits.max_processes + _HELPERS
            )
            if cgroup is not None:
                joins = cgroup.procs_files
                argv = ["/bin/sh", "-c", _JOIN_CGROUP, "sh", str(len(joins)), *joins, *argv]
            started = time.perf_counter()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=[fd for fd, _ in fds],
                    start_new_session=True,
                    env=_CLEAN_ENVIRONMENT,
                )
            except BaseException:
                if cgroup is not None:
                    cgroup.remove()
                raise
        finally:
            for fd, _ in fds:
                os.close(fd)  # bwrap has its own copies once started
        try:
            return await self._collect(proc, stdin, started)
        finally:
            if cgroup is not None:
                await _remove(cgroup)

    async def _collect(
        self, proc: asyncio.subprocess.Process, stdin: str | None, started: float
    ) -> ExecutionResult:
        cap = self.limits.max_output_bytes
        overflow = asyncio.Event()

        async def read(stream: asyncio.StreamReader | None) -> bytes:
            kept = bytearray()
            assert stream is not None
            while chunk := await stream.read(65536):
                room = cap - len(kept)
                if len(chunk) > room:
                    kept += chunk[:room]
                    overflow.set()
                    # Drain to EOF (the sandbox is being killed): asyncio reports the
                    # process's end only once all of its pipes are closed.
                    while await stream.read(65536):
                        pass
                    break
                kept += chunk
            return bytes(kept)

        async def feed() -> None:
            if stdin is None or proc.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin.encode())
                await proc.stdin.drain()
            proc.stdin.close()

        readers = asyncio.gather(read(proc.stdout), read(proc.stderr), feed(), proc.wait())
        overflowed = asyncio.ensure_future(overflow.wait())
        timed_out = False
        try:
            waiting: set[asyncio.Future[Any]] = {readers, overflowed}
            done, _ = await asyncio.wait(
                waiting, timeout=self.limits.timeout_s, return_when="FIRST_COMPLETED"
            )
            if readers not in done:
                timed_out = not overflow.is_set()
                _kill(proc)
            out, err, _, _ = await readers
        except BaseException:
            _kill(proc)
            readers.cancel()
            raise
        finally:
            overflowed.cancel()
        duration = time.perf_counter() - started
        killed = timed_out or overflow.is_set()
        stderr = err.decode(errors="replace")
        if proc.returncode == _CGROUP_FAILED and stderr.startswith("proctor: cannot join"):
            raise SandboxUnavailable(
                f"the sandbox could not join its cgroup ({stderr.strip()[:300]}): "
                f"{_NEVER_UNSANDBOXED}."
            )
        if proc.returncode == 1 and stderr.startswith(_BWRAP_MESSAGE) and not killed:
            # bwrap's own set-up failed: the program never ran, so this is no verdict on it.
            raise SandboxUnavailable(
                f"the sandbox failed to start ({stderr.strip()[:300]}): {_NEVER_UNSANDBOXED}."
            )
        return ExecutionResult(
            stdout=out.decode(errors="replace"),
            stderr=stderr,
            exit_code=None if killed else proc.returncode,
            timed_out=timed_out,
            output_truncated=overflow.is_set(),
            duration_s=duration,
        )

    def _argv(
        self, bwrap: str, prlimit: str, files: list[tuple[int, str]], command: list[str]
    ) -> list[str]:
        limits = self.limits
        disk = limits.disk_mb << 20
        argv = [
            *_as_user(),
            bwrap,
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--setenv",
            "PATH",
            SYSTEM_PATH,
            "--setenv",
            "HOME",
            "/work",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONDONTWRITEBYTECODE",
            "1",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = f"/{top}"
            if os.path.islink(host):
                argv += ["--symlink", os.readlink(host), host]  # merged /usr
            elif os.path.isdir(host):
                argv += ["--ro-bind", host, host]
        if not self.python.startswith("/usr/"):
            # An interpreter installed elsewhere: its whole prefix, read-only.
            prefix = os.path.dirname(os.path.dirname(self.python))
            argv += ["--ro-bind", prefix, prefix]
        argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for tmpfs in ("/dev/shm", "/tmp", "/work"):
            argv += ["--size", str(disk), "--tmpfs", tmpfs]
        for fd, name in files:
            argv += ["--file", str(fd), f"/work/{name}"]
        argv += ["--chdir", "/work", "--remount-ro", "/", "--"]
        argv += [
            prlimit,
            f"--cpu={limits.cpu_s}",
            f"--as={limits.memory_mb << 20}",
            f"--nproc={limits.max_processes}",
            f"--fsize={disk}",
            "--core=0",
            "--",
            *command,
        ]
        return argv


def _as_user() -> list[str]:
    """Root runs sandboxes as nobody (see the module docstring), through util-linux's setpriv
    (event loops such as uvloop cannot switch users themselves); anyone else as themselves."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise SandboxUnavailable(
            "as root, sandboxes drop to the user nobody with setpriv, and `setpriv` is not on "
            f"PATH; install util-linux: {_NEVER_UNSANDBOXED}."
        )
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


_HELPERS = 2
"""Processes of a sandbox besides the program's: bubblewrap's monitor and its PID 1."""


async def _remove(cgroup: SandboxCgroup) -> None:
    """Remove a finished sandbox's cgroup once its last process is gone (a bounded wait)."""
    for _ in range(100):
        if cgroup.remove():
            return
        await asyncio.sleep(0.02)
    logger.warning("the cgroup of a finished sandbox is still busy; it is left for later")


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the sandbox's session; bwrap's PID namespace takes every process with it."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
