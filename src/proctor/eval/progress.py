"""How a running eval shows itself: a live rich view on a terminal, or plain log lines."""

from __future__ import annotations

import logging
import time
from typing import IO, TYPE_CHECKING, Protocol

from proctor.eval.stats import RunStats

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

logger = logging.getLogger(__name__)


class ProgressView(Protocol):
    """Told about the run as it goes; must be cheap, it is called once per episode."""

    def start(self, stats: RunStats, *, title: str) -> None: ...

    def update(self, stats: RunStats) -> None: ...

    def stop(self, stats: RunStats) -> None: ...


class LogProgress:
    """A log line every `interval_s` seconds (the `--no-rich` view, and the one off a TTY)."""

    def __init__(self, *, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self._next = 0.0

    def start(self, stats: RunStats, *, title: str) -> None:
        logger.info("%s: %d episodes to run", title, stats.total - stats.done)
        self._next = time.monotonic() + self.interval_s

    def update(self, stats: RunStats) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval_s
            logger.info(_line(stats))

    def stop(self, stats: RunStats) -> None:
        logger.info(_line(stats))


class RichProgress:
    """The live view: progress bar, rollouts/s, running mean reward, errors."""

    def __init__(self, stream: IO[str]) -> None:
        from rich.console import Console

        self.console = Console(file=stream)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def start(self, stats: RunStats, *, title: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} rollouts/s"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=self.console,
            refresh_per_second=4,
            transient=False,
        )
        self._task = progress.add_task(
            title, total=stats.total, completed=stats.done, rate=0.0, reward="-", errors=0
        )
        progress.start()
        self._progress = progress

    def update(self, stats: RunStats) -> None:
        progress = self._progress
        if progress is not None and self._task is not None:
            mean = stats.mean_reward
            progress.update(
                self._task,
                completed=stats.done,
                rate=stats.rate,
                reward="-" if mean is None else f"{mean:.3f}",
                errors=stats.errors,
            )

    def stop(self, stats: RunStats) -> None:
        self.update(stats)
        if self._progress is not None:
            self._progress.stop()


def _line(stats: RunStats) -> str:
    mean = stats.mean_reward
    reward = "-" if mean is None else f"{mean:.3f}"
    return (
        f"{stats.done}/{stats.total} episodes, {stats.rate:.1f} rollouts/s, "
        f"mean reward {reward}, {stats.errors} errors"
    )
