"""Running figures of an eval: done, errors, mean reward, per-reward means, tokens, rate.

The mean reward and its interval follow `proctor.stats`, the same arithmetic as the
platform's, so the closing line and the dashboard show one number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proctor import stats as arithmetic


@dataclass(slots=True)
class RunStats:
    """Folds finished episode records into the figures the progress view and summary show.

    Rewards are averaged over scored episodes (a reward and no error): a failed rollout's
    rewards are unknown, and the error rate reports it separately.
    """

    total: int
    """Episodes the run will have when complete (kept ones included)."""
    done: int = 0
    errors: int = 0
    reward_sum: float = 0.0
    scored: int = 0
    """Episodes with a reward and no error."""
    rewards: dict[str, list[float]] = field(default_factory=dict)
    """Per reward/metric name: [sum, count]."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    by_example: dict[int, list[float]] = field(default_factory=dict)
    """Per example id: [scored rollouts, sum of rewards, sum of squared rewards]."""
    new_done: int = 0
    """Episodes finished by this invocation (kept ones of a resume excluded), for the rate."""
    reward_range: list[float] = field(default_factory=list)
    """[lowest, highest] scored reward (empty before the first)."""
    binary: bool = True
    """Every scored reward is 0 or 1 (the interval is then Wilson's, as the platform's)."""

    def add(self, record: dict[str, Any], *, new: bool = True) -> None:
        """Count one finished episode record."""
        self.done += 1
        if new:
            self.new_done += 1
        usage = record.get("token_usage") or {}
        self.prompt_tokens += usage.get("prompt_tokens", 0)
        self.completion_tokens += usage.get("completion_tokens", 0)
        if record.get("error") is not None:
            self.errors += 1
            return
        reward = record.get("reward")
        if reward is not None:
            self.scored += 1
            self.reward_sum += reward
            example = record.get("example_id")
            key = int(example) if example is not None else -self.scored  # alone if unknown
            totals = self.by_example.setdefault(key, [0, 0.0, 0.0])
            totals[0] += 1
            totals[1] += reward
            totals[2] += reward * reward
            if self.reward_range:
                self.reward_range[0] = min(self.reward_range[0], reward)
                self.reward_range[1] = max(self.reward_range[1], reward)
            else:
                self.reward_range[:] = [reward, reward]
            self.binary = self.binary and reward in (0.0, 1.0)
        for group in ("rewards", "metrics"):
            for name, value in (record.get(group) or {}).items():
                if value is None:
                    continue
                acc = self.rewards.get(name)
                if acc is None:
                    self.rewards[name] = [float(value), 1.0]
                else:
                    acc[0] += value
                    acc[1] += 1

    @property
    def ok(self) -> int:
        return self.done - self.errors

    @property
    def mean_reward(self) -> float | None:
        """Mean reward of the scored episodes so far (None before the first)."""
        return self.reward_sum / self.scored if self.scored else None

    def estimate(self) -> arithmetic.MeanEstimate:
        """The mean reward with its standard error clustered by example and 95% interval."""
        moments = arithmetic.Moments()
        for n, total, total_sq in self.by_example.values():
            moments.add_totals(int(n), total, total_sq)
        if self.reward_range:
            moments.observe_range(*self.reward_range, binary=self.binary)
        return arithmetic.estimate(moments)

    @property
    def error_rate(self) -> float:
        return self.errors / self.done if self.done else 0.0

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def rate(self) -> float:
        """Episodes finished per second by this invocation."""
        elapsed = self.elapsed_s
        return self.new_done / elapsed if elapsed > 0 else 0.0

    def reward_means(self) -> dict[str, float]:
        """Mean of each reward function and metric over the episodes that produced it."""
        return {name: acc[0] / acc[1] for name, acc in self.rewards.items() if acc[1]}

    def summary(self) -> dict[str, Any]:
        """The figures of the final summary, as plain data."""
        return {
            "episodes": self.done,
            "expected": self.total,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "avg_reward": self.mean_reward,
            "reward": self.estimate().to_json(),
            "reward_means": self.reward_means(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "wall_s": self.elapsed_s,
        }
