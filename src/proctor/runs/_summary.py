"""The run summary a finished eval writes into the evaluation's `metrics`.

`avg_reward` is the mean episode reward, `avg_metrics` the mean of each reward function's
raw score and each metric (over the episodes where it is not null; a metric overrides a
reward of the same name within one episode), `avg_error` the share of episodes that errored.
Sums are kept as records pass, so summarizing 100,000 episodes holds no episode in memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


class SummaryAccumulator:
    """Running sums over episode records; `summary()` gives the contract's three keys."""

    def __init__(self) -> None:
        self.episodes = 0
        self.errored = 0
        self._reward_sum = 0.0
        self._reward_n = 0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, record: dict[str, Any]) -> None:
        """Count one episode record."""
        self.episodes += 1
        ok = record.get("ok")
        if ok is False or (ok is None and record.get("error") is not None):
            self.errored += 1
        reward = record.get("reward")
        if isinstance(reward, int | float) and math.isfinite(reward):
            self._reward_sum += float(reward)
            self._reward_n += 1
        values: dict[str, Any] = {**(record.get("rewards") or {}), **(record.get("metrics") or {})}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(value):
                continue
            self._sums[name] = self._sums.get(name, 0.0) + float(value)
            self._counts[name] = self._counts.get(name, 0) + 1

    def summary(self) -> dict[str, Any]:
        """`{"avg_reward", "avg_metrics", "avg_error"}` (zeros when nothing was counted)."""
        return {
            "avg_reward": _finite(self._reward_sum / self._reward_n if self._reward_n else 0.0),
            "avg_metrics": {
                name: _finite(self._sums[name] / self._counts[name]) for name in self._sums
            },
            "avg_error": self.errored / self.episodes if self.episodes else 0.0,
        }


def _finite(value: float) -> float | None:
    # Values near 1e308 overflow their sum; JSON has no Infinity, so the mean is unknown.
    return value if math.isfinite(value) else None


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a set of episode records (see the module docstring)."""
    acc = SummaryAccumulator()
    for record in records:
        acc.add(record)
    return acc.summary()
