"""Real processes for tests: start on loopback, wait until they answer, stop by PID."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import httpx
import psutil

from tests.support.waiting import wait_until

PROCTOR = [sys.executable, "-m", "proctor.cli.main"]


@cache
def tls() -> ssl.SSLContext:
    """The one TLS context of this process's test HTTP clients (pass it as `verify=`).

    httpx builds a fresh context for each client it makes, loading the CA bundle again
    (~25 ms of CPU), and a test polling a loopback server makes hundreds of clients."""
    return ssl.create_default_context()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, *, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll `url` until it answers anything below 500, or fail with the process's output."""

    def answered() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            return httpx.get(url, timeout=1.0, verify=tls()).status_code < 500
        except httpx.HTTPError:
            return False

    wait_until(answered, timeout=timeout, what=f"{url} answering")


@dataclass
class ManagedProcess:
    """A subprocess in its own process group, with its output in a log file."""

    args: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> ManagedProcess:
        env = {**os.environ, **(self.env or {})}
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args,
            env=env,
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group, as a crash would."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def read_pid(path: Path, timeout: float = 120.0) -> int:
    """The pid a process wrote to `path`, once it has."""

    def written() -> str:
        return path.read_text().strip() if path.exists() else ""

    return int(wait_until(written, timeout=timeout, what=f"a pid in {path}").split()[0])


def gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether the process `pid` is gone (or a zombie) within `timeout` seconds."""

    def dead() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    try:
        return wait_until(dead, timeout=timeout, what=f"process {pid} ending")
    except TimeoutError:
        return False
