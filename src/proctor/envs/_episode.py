"""The episode: one rollout of one task, with its conversation, scores, timing and outcome.

A failed rollout is still an episode: `error` says what went wrong and `ok` is False. The
class is a plain slotted dataclass, so building one costs microseconds; `to_record()` is the
JSON-ready form every other part of proctor (run directory, runs SDK, platform) consumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Stop conditions the built-in drivers set; custom drivers may add their own strings.
COMPLETED = "completed"
MAX_TURNS = "max_turns"
MODEL_ERROR = "model_error"
TOOL_ERROR = "tool_error"
ENV_ERROR = "env_error"


def _empty_usage() -> dict[str, int]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


@dataclass(slots=True)
class Episode:
    """One rollout of one task, successful or not."""

    id: str
    """Unique episode id (the platform's `sample_id`)."""
    env: str
    """Name of the environment that produced it."""
    example_id: int
    """Index of the task in its taskset."""
    rollout_number: int
    """1-based number of this rollout of the task."""
    task: dict[str, Any]
    """The task as `Task.to_record()` gives it."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The whole conversation as OpenAI chat dicts (system, user, assistant, tool)."""
    rewards: dict[str, float | None] = field(default_factory=dict)
    """Raw score of each reward function, by name (None when it failed or did not run)."""
    metrics: dict[str, float | None] = field(default_factory=dict)
    """Value of each metric, by name (None when it failed or did not run)."""
    reward: float = 0.0
    """Weighted sum of the reward functions' scores (failed ones count 0)."""
    timing: dict[str, float] = field(default_factory=dict)
    """`start`, `end` (epoch seconds), `duration_s`, `model_s`, `scoring_s`."""
    token_usage: dict[str, int] = field(default_factory=_empty_usage)
    """`prompt_tokens`, `completion_tokens`, `total_tokens` summed over model calls."""
    error: dict[str, Any] | None = None
    """None, or `{"type", "message", "status_code"?, "stage"?}` for a failed rollout."""
    stop_condition: str = ""
    """Why the conversation ended: `completed`, `max_turns`, `model_error`, ..."""
    is_completed: bool = False
    """The conversation reached its natural end."""
    is_truncated: bool = False
    """The conversation was cut short by a turn limit or the model's length limit."""
    num_turns: int = 0
    """Number of model calls made."""
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    """What happened beside the conversation, in order, one dict per event with a `type`:
    `sandbox` (a sandboxed execution: stdout, stderr, exit code, timeout), `judge` (a judge
    model's prompt, raw reply, score and latency)."""
    run: dict[str, Any] | None = None
    """`{"id", "name"}` of the run, stamped by the runner."""
    native: dict[str, Any] | None = None
    """The episode as a foreign driver recorded it (a verifiers `Episode.to_record()`), kept
    whole; its platform sample is `proctor.projection.project_episode` of it."""

    @property
    def ok(self) -> bool:
        """True when the rollout recorded no error."""
        return self.error is None

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready dict form, with stable keys (no copies: do not mutate the result);
        `native` only when set."""
        record = {
            "id": self.id,
            "env": self.env,
            "example_id": self.example_id,
            "rollout_number": self.rollout_number,
            "task": self.task,
            "messages": self.messages,
            "rewards": self.rewards,
            "metrics": self.metrics,
            "reward": self.reward,
            "timing": self.timing,
            "token_usage": self.token_usage,
            "error": self.error,
            "stop_condition": self.stop_condition,
            "is_completed": self.is_completed,
            "is_truncated": self.is_truncated,
            "num_turns": self.num_turns,
            "trajectory": self.trajectory,
            "run": self.run,
            "ok": self.error is None,
        }
        if self.native is not None:
            record["native"] = self.native
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Episode:
        """Rebuild an episode from `to_record()` output (e.g. when resuming a run)."""
        return cls(
            id=record["id"],
            env=record["env"],
            example_id=int(record["example_id"]),
            rollout_number=int(record["rollout_number"]),
            task=record["task"],
            messages=list(record.get("messages") or []),
            rewards=dict(record.get("rewards") or {}),
            metrics=dict(record.get("metrics") or {}),
            reward=float(record.get("reward") or 0.0),
            timing=dict(record.get("timing") or {}),
            token_usage=dict(record.get("token_usage") or _empty_usage()),
            error=record.get("error"),
            stop_condition=record.get("stop_condition") or "",
            is_completed=bool(record.get("is_completed")),
            is_truncated=bool(record.get("is_truncated")),
            num_turns=int(record.get("num_turns") or 0),
            trajectory=list(record.get("trajectory") or []),
            run=record.get("run"),
            native=record.get("native"),
        )
