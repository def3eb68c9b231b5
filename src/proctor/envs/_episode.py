"""The episode: one rollout of one task, with its conversation, scores, timing and outcome.

A failed rollout is still an episode: `error` says what went wrong and `ok` is False. The
class is a plain slotted dataclass, so building one costs microseconds; `to_record()` is the
JSON-ready form every other part of proctor (run directory, runs SDK, platform) consumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, get_origin, get_type_hints

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
        """The JSON-ready dict form: every field in declaration order, then `ok` (no copies:
        do not mutate the result); `native` only when set."""
        record = {name: getattr(self, name) for name in _RECORD_FIELDS}
        record["ok"] = self.error is None
        if self.native is not None:
            record["native"] = self.native
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Episode:
        """Rebuild an episode from `to_record()` output (e.g. when resuming a run): a field
        without a default must be there; an empty or missing one gets its default."""
        values: dict[str, Any] = {}
        for name, convert, default in _READERS:
            value = record[name] if default is MISSING else record.get(name)
            if not value and default is not MISSING:
                value = default()
            elif convert is not None:
                value = convert(value)
            values[name] = value
        return cls(**values)


# The field table: the record's keys, and how `from_record` reads each back, come from the
# dataclass itself, so a new field is one line above.
_RECORD_FIELDS = tuple(f.name for f in fields(Episode) if f.name != "native")


def _reader(f: Field[Any]) -> tuple[str, Callable[[Any], Any] | None, Any]:
    hint = get_type_hints(Episode)[f.name]
    plain = get_origin(hint) or hint
    convert = plain if plain in (int, float, str, bool, dict, list) else None
    if f.default is not MISSING:
        default = f.default
        return f.name, convert, lambda: default
    if f.default_factory is not MISSING:
        return f.name, convert, f.default_factory
    return f.name, convert, MISSING


_READERS = tuple(_reader(f) for f in fields(Episode))
