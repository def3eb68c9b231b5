"""The one pty runner: a command whose stderr is a terminal, as a user's shell gives it."""

from __future__ import annotations

import os
import pty
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TerminalRun:
    """What a command run on a terminal left: its exit code, stdout and the screen."""

    returncode: int
    stdout: bytes
    screen: bytes
    """Everything written to the terminal (stderr), escape sequences included."""


def run_on_a_terminal(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 120.0
) -> TerminalRun:
    """Run `args` with a pty as stderr and a pipe as stdout, reading both as they come.

    Raises:
        TimeoutError: the command was still running after `timeout` seconds (it is killed).
    """
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        list(args), cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=slave
    )
    os.close(slave)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    chunks: dict[int, list[bytes]] = {master: [], out: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                os.close(master)
                raise TimeoutError(f"{args[:4]} still ran after {timeout:g}s")
            for key, _ in selector.select(timeout=min(left, 1.0)):
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    data = b""
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    os.close(master)
    proc.stdout.close()
    returncode = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    return TerminalRun(returncode, b"".join(chunks[out]), b"".join(chunks[master]))
