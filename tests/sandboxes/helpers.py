"""Helpers shared by the sandbox backends' tests (local, confined, Ray)."""

from __future__ import annotations

from typing import Protocol

from proctor.sandboxes.sandbox import SandboxHandle, SandboxState
from tests.support.waiting import wait_until


class Polled(Protocol):
    def poll(self, handle: SandboxHandle) -> SandboxState: ...


def exited(
    backend: Polled, handle: SandboxHandle, *, timeout: float = 60.0, interval: float = 0.05
) -> SandboxState:
    """Poll the sandbox until its command has ended; returns its final state."""
    last: list[SandboxState] = []

    def ended() -> SandboxState | None:
        last[:] = [backend.poll(handle)]
        return None if last[0].running else last[0]

    return wait_until(
        ended, timeout=timeout, interval=interval, what=lambda: f"the sandbox exiting ({last})"
    )
