"""Real processes forked from one Python that imported their heavy modules once.

A console script whose import is most of its run (`vf-eval`, `proctor eval` of a verifiers
environment: ~5 CPU-s of imports each) costs that import in every test that starts it. A
`ForkServer` imports those modules once per test worker and forks each process from it: the
child takes its own session, working directory, environment, argv and log, and calls the
console script's entry point (`module:function`) as the script does, so it is a real process
running the real entry point, reached by signals as one started with `ManagedProcess` is, and
it ends as an interpreter does (atexit handlers, non-daemon threads, exit code).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_SERVER = r"""
import gc, importlib, json, os, select, signal, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
# What the imports built stays shared with each child: its collector never walks (and so never
# copies) those pages.
gc.freeze()
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)


def child(job):
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)
        os.setsid()
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        module, _, function = job["entry"].partition(":")
        entry = getattr(importlib.import_module(module), function)
        sys.argv = job["argv"]
    except BaseException as e:
        print(f"fork server: could not start {job['argv']}: {e!r}", file=sys.stderr, flush=True)
        os._exit(127)
    # As the console script does; what it raises ends this process as it would that one.
    sys.exit(entry())


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        print("exit", pid, os.waitstatus_to_exitcode(status), flush=True)


pending = b""
while True:
    try:
        ready = select.select([0, wake_r], [], [])[0]
    except InterruptedError:
        continue
    if wake_r in ready:
        os.read(wake_r, 4096)
        reap()
    if 0 not in ready:
        continue
    data = os.read(0, 65536)
    if not data:
        break
    pending += data
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        job = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(job)
        print("pid", pid, flush=True)
"""
"""Imports the modules named in argv, then forks one child per line `{"entry", "argv",
"cwd", "env", "log"}` on stdin: answers `pid P` at once and `exit P C` when a child ends (C as
`subprocess` reports it: negative for a signal)."""


class ForkServer:
    """One warm Python per test worker (or module) that forks the processes tests start."""

    def __init__(self, preload: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER, *preload],
                env={**os.environ, **env},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                bufsize=0,
                start_new_session=True,
            )
        self.log = log
        self._buffer = b""
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self.children: list[Forked] = []

    def _read(self, timeout: float) -> bool:
        """Read what the server answered within `timeout` s; False if nothing came."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0))
        if not ready:
            return False
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:
            raise RuntimeError(
                f"the fork server ended (exit code {self.proc.poll()}): "
                + self.log.read_text(errors="replace")[-3000:]
            )
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            words = line.decode().split()
            if words[0] == "pid":
                self._pids.append(int(words[1]))
            elif words[0] == "exit":
                self._exits[int(words[1])] = int(words[2])
        return True

    def start(
        self, entry: str, argv: list[str], *, cwd: Path, log: Path, env: Mapping[str, str]
    ) -> Forked:
        """Fork a process that runs `entry` (`module:function`) with `sys.argv = argv` in its
        own session, in `cwd`, with exactly the environment `env`, its output in `log`."""
        job = {"entry": entry, "argv": argv, "cwd": str(cwd), "env": dict(env), "log": str(log)}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not self._pids:
            assert self._read(deadline - time.monotonic()), "the fork server did not answer"
        child = Forked(self, self._pids.pop(0), log)
        self.children.append(child)
        return child

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """`pid`'s exit code once it has ended, waiting up to `timeout` s; None if still running."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits:
            if not self._read(deadline - time.monotonic()):
                return None
        return self._exits[pid]

    def close(self) -> None:
        """Kill what still runs (each child's process group), then end the server."""
        for child in self.children:
            child.stop(timeout=5)
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class Forked:
    """A process a `ForkServer` forked: what tests use of `ManagedProcess`, by its pid."""

    def __init__(self, server: ForkServer, pid: int, log_path: Path) -> None:
        self.server = server
        self.pid = pid
        self.log_path = log_path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def poll(self) -> int | None:
        return self.server.exit_code(self.pid, 0)

    def wait(self, timeout: float) -> int:
        """Its exit code, within `timeout` s (TimeoutError past it)."""
        code = self.server.exit_code(self.pid, timeout)
        if code is None:
            raise TimeoutError(f"process {self.pid} still ran after {timeout:.0f} s")
        return code

    def signal(self, sig: int) -> None:
        """Signal its process group, while it runs."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; returns the exit code."""
        self.signal(signal.SIGTERM)
        code = self.server.exit_code(self.pid, timeout)
        if code is None:
            self.signal(signal.SIGKILL)
            code = self.server.exit_code(self.pid, 10)
        return code
