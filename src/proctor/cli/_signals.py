"""SIGTERM and SIGHUP stop a long-running command as Ctrl-C does: its children are ended and
its ports freed on the way out, and it exits 128 + the signal's number (143, 129; 130 for
Ctrl-C). A SIGHUP ignored when the command started (`nohup`) stays ignored."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

EXIT_INTERRUPTED = 130
"""128 + SIGINT: what a command stopped by Ctrl-C exits with."""


def stop_signals() -> list[signal.Signals]:
    """The signals besides SIGINT that stop a long-running command here."""
    wanted = [signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        wanted.append(signal.SIGHUP)
    return wanted


@contextlib.contextmanager
def interrupt_on_stop_signals() -> Iterator[list[int]]:
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt (the first one only, so a
    second signal cannot break the clean-up); the list yielded holds the signals received."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in stop_signals()}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def exit_code(received: list[int]) -> int:
    """128 + the first stop signal received, else 130 (Ctrl-C)."""
    return 128 + received[0] if received else EXIT_INTERRUPTED
