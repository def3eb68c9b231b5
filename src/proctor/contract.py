"""The wire contract between the engine, the runs SDK and the platform (`platform-api.md`).

Owned by neither side and imported by both: an evaluation's `Status` and its named sets
(each defined here and nowhere else; `tests/test_contract.py` fails on a copy), the size
limits both sides enforce, and the `Sample` the runs SDK builds from an episode and the
server and dashboard read. The server stores samples exactly as sent, so `Sample` is the
shape a proctor client sends, not a filter on what the server accepts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Status(StrEnum):
    """An evaluation's status on the platform (`platform-api.md`, "Status")."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"


# Not finalized yet: a run is (or will be) writing samples to it.
OPEN_STATUSES = frozenset({Status.PENDING, Status.RUNNING})
# Statuses an evaluation never leaves: no status change, no second finalize.
TERMINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.TIMEOUT})
# Closed without results: samples and a finalize are refused (409), a sandbox is stopped.
CLOSED_STATUSES = frozenset({Status.FAILED, Status.CANCELLED, Status.TIMEOUT})
# Statuses a client may set with `PUT /evaluations/{id}` (COMPLETED only comes from finalize).
SETTABLE_STATUSES = (Status.FAILED, Status.CANCELLED)
# Finalized or finalizing: what a finalize reached (the statistics task then completes it).
FINALIZED_STATUSES = (Status.PROCESSING, Status.COMPLETED)
# No longer open to a run attaching to it: finalizing, finalized or failed.
UNATTACHABLE_STATUSES = frozenset(Status) - OPEN_STATUSES
# Taking no new samples: once finalize started the statistics are fixed (replays succeed).
INGEST_CLOSED_STATUSES = frozenset(Status) - OPEN_STATUSES


class Event(StrEnum):
    """Something that changes an evaluation's status; `TRANSITIONS` says from where to what."""

    START = "start"
    """A hosted sandbox started the run."""
    FINALIZE = "finalize"
    """The run delivered its samples (`POST .../finalize`); the statistics task follows."""
    COMPLETE = "complete"
    """The statistics task computed the summary."""
    FAIL = "fail"
    """The run failed (`PUT status=FAILED`, or its sandbox ended badly)."""
    CANCEL = "cancel"
    """Someone stopped the run (`PUT status=CANCELLED`, a hosted cancel)."""
    TIME_OUT = "time_out"
    """The hosted launcher's timeout ended the run."""
    REOPEN = "reopen"
    """The run itself took its evaluation back (`--resume`, a proctor extension)."""
    OVERRULE = "overrule"
    """The launcher found a finalized hosted run incomplete: its finalize is not trusted."""


TRANSITIONS: dict[Event, tuple[frozenset[Status], Status]] = {
    Event.START: (frozenset({Status.PENDING}), Status.RUNNING),
    Event.FINALIZE: (OPEN_STATUSES, Status.PROCESSING),
    Event.COMPLETE: (frozenset({Status.PROCESSING}), Status.COMPLETED),
    # Once finalize is acknowledged the run is finishing: a cancel or failure racing it loses
    # (409), so exactly one of the two is acknowledged.
    Event.FAIL: (OPEN_STATUSES, Status.FAILED),
    Event.CANCEL: (OPEN_STATUSES, Status.CANCELLED),
    Event.TIME_OUT: (OPEN_STATUSES, Status.TIMEOUT),
    Event.REOPEN: (frozenset({Status.RUNNING, Status.FAILED, Status.CANCELLED}), Status.RUNNING),
    Event.OVERRULE: (frozenset({Status.PROCESSING, Status.COMPLETED}), Status.FAILED),
}
"""The one table of status changes: each event's legal from-statuses and its target. Every
change goes through `proctor.server.evaluations.service.transition`, which applies it."""

EVENT_OF_STATUS: dict[Status, Event] = {
    Status.FAILED: Event.FAIL,
    Status.CANCELLED: Event.CANCEL,
    Status.TIMEOUT: Event.TIME_OUT,
}
"""The event that ends a run with this status (a `PUT` or a launcher's verdict)."""

RunStatus = Literal["completed", "failed", "cancelled"]
"""How a client's run ended (`Run.finish(status=...)`); not a platform `Status`."""
# The platform status a run's failure is recorded as.
FAILURE_STATUS: dict[str, Status] = {"failed": Status.FAILED, "cancelled": Status.CANCELLED}

ERROR_MESSAGE_MAX = 4096
"""Characters of an evaluation's `error_message` kept; longer ones are cut, not refused."""
SAMPLE_ID_MAX = 200
"""Characters a `sample_id` may have (and must have at least one)."""
MAX_REQUEST_BYTES = 25 * 1024 * 1024
"""The largest request body the server accepts by default (a larger one is a 413)."""


class Sample(BaseModel):
    """One episode as the platform stores it (`POST /evaluations/{id}/samples`).

    Besides these fields a sample carries each reward function's raw score as a top-level
    key (`"alphabet_sort": 0.8`); the server stores unknown keys as given.
    """

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    sample_id: str
    """The episode id; the idempotency key of an upload."""
    example_id: int | None = None
    """The task's index in its taskset."""
    rollout_number: int | None = None
    """1-based number of this rollout of the example."""
    episode_id: str | None = None
    """The episode id again (what the dashboard links by)."""
    task: dict[str, Any] = {}
    """The task as `Task.to_record()` gives it."""
    prompt: list[Any] = []
    """The chat messages the model saw before it first answered."""
    completion: list[Any] = []
    """The chat messages after the prompt: the model's answers and tool results."""
    answer: Any = None
    """The task's reference answer, when it has one."""
    reward: float | None = None
    """The weighted sum of the reward functions' scores (null when non-finite)."""
    metrics: dict[str, Any] = {}
    """Each metric's value, by name."""
    timing: dict[str, Any] = {}
    """`start`, `end` (epoch seconds), `duration_s`, `model_s`, `scoring_s`."""
    token_usage: dict[str, Any] | None = None
    """`prompt_tokens`, `completion_tokens`, `total_tokens` summed over model calls."""
    is_completed: bool = False
    """The conversation reached its natural end."""
    is_truncated: bool = False
    """The conversation was cut short by a turn limit or the model's length limit."""
    error: dict[str, Any] | None = None
    """None, or `{"type", "message", ...}` for a failed rollout."""
    stop_condition: str | None = None
    """Why the conversation ended: `completed`, `max_turns`, `model_error`, ..."""
    trajectory: list[Any] = []
    """What happened beside the conversation, in order: sandbox runs, judge calls (dicts
    with a `type`)."""
    info: dict[str, Any] = {}
    """The task's free-form `info`."""
    env: str | None = None
    """The name of the environment that produced the episode."""
    num_turns: int | None = None
    """The number of model calls made."""


SAMPLE_FIELDS: tuple[str, ...] = tuple(Sample.model_fields)
"""The sample's named fields, in the order the runs SDK writes them."""
