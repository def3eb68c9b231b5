"""How an eval talks to the platform: open (or attach to) a run, log episodes, finish.

The engine calls only `open_platform_run` and the `PlatformRun` methods; the rules of the
attach contract (DESIGN.md) live here, on top of the public `proctor.runs` API.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Literal, Protocol

RunStatus = Literal["completed", "failed", "cancelled"]


class PlatformRun(Protocol):
    """The handle the engine logs episodes to."""

    id: str
    """The platform's evaluation id, or a local id when not pushing."""
    url: str | None
    """Where the evaluation can be viewed, when it is on a platform."""
    attached: bool

    def log_episodes(self, records: list[dict[str, Any]]) -> None:
        """Hand finished episodes (`Episode.to_record()` dicts) over; never blocks on the network."""

    def finish(
        self, *, status: RunStatus = "completed", error: str | None = None, timeout: float | None = None
    ) -> None:
        """Drain uploads, write the summary metrics, finalize (or mark failed/cancelled)."""


class LocalRun:
    """A run that stays on disk: nothing is sent anywhere."""

    def __init__(self) -> None:
        self.id = f"local-{uuid.uuid4().hex[:12]}"
        self.url: str | None = None
        self.attached = False

    def log_episodes(self, records: list[dict[str, Any]]) -> None:
        pass

    def finish(
        self, *, status: RunStatus = "completed", error: str | None = None, timeout: float | None = None
    ) -> None:
        pass


def open_platform_run(
    *,
    push: bool,
    attach: str | None,
    name: str,
    environment: str,
    model: str,
    config: dict[str, Any],
    run_dir: Path,
) -> PlatformRun:
    """Open the run an eval logs to, following the attach contract.

    Raises `ConfigError` / `AttachError` before any rollout when an attach cannot work.
    """
    return LocalRun()
