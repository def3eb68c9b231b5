"""Shapes of the traces service: the upload's receipt and the public read models.

The read models follow the public traces client's (`prime_traces.models`): summaries carry
what a listing shows; `?raw=true` returns a record's document as it was sent.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from proctor.server.traces.upload import SCHEMA_VERSION


class UploadReceipt(BaseModel):
    """Answer of `POST /traces`: every line is stored (there is no partial success)."""

    upload_id: str
    """The SHA-256 of the uncompressed JSONL, 64 lowercase hex (the key without `sha256:`)."""
    status: str = "committed"


class ModelInfo(BaseModel):
    """The model a trace's calls went to."""

    provider: str | None
    id: str | None


class Score(BaseModel):
    """A trace's reward (null: unscored) and outcome."""

    reward: float | None
    outcome: str | None


class Execution(BaseModel):
    """Whether a trace failed or was cut short."""

    has_error: bool
    is_truncated: bool


class TraceSummary(BaseModel):
    """One stored trace: a bare trace line or a member of an episode line."""

    model_config = ConfigDict(extra="allow")

    trace_id: str
    upload_id: str
    episode_id: str | None
    created_at: str
    """The trace's start (`timing.start`), else when it was stored."""
    ingested_at: str
    run_id: str
    """The evaluation it is stored against (its `run.id`)."""
    environment_id: str | None
    model: ModelInfo
    task_id: str | None
    agent_name: str | None
    score: Score
    execution: Execution
    duration_ms: int
    total_tokens: int
    size_bytes: int
    context: dict[str, str]
    """The upload's `metadata.context`."""


class EpisodeError(BaseModel):
    """An episode's last error."""

    type: str | None
    message: str | None


class EpisodeSummary(BaseModel):
    """One stored episode line."""

    model_config = ConfigDict(extra="allow")

    episode_id: str
    upload_id: str
    schema_version: int = SCHEMA_VERSION
    created_at: str
    ingested_at: str
    run_id: str
    environment_id: str | None
    outcome: str | None
    has_error: bool
    error: EpisodeError
    trace_count: int


class EpisodeTraceAggregate(BaseModel):
    """An episode's member traces, totalled at read time."""

    trace_count: int
    total_tokens: int
    total_duration_ms: int
    any_trace_error: bool
    agent_names: list[str]


class EpisodeDetail(EpisodeSummary):
    """`GET /episodes/{id}`: the episode's own summary and its member-trace aggregate."""

    traces: EpisodeTraceAggregate


class TraceNode(BaseModel):
    """One message node of a trace, in step order."""

    node_idx: int
    parent_idx: int | None
    timestamp: float | None
    sampled: bool
    message: dict[str, Any]
    """The message as stored (`role`, `content`, `tool_calls`, ...)."""


class TraceNodePage(BaseModel):
    """One page of a trace's nodes; `partial_index` is always false (no indexing cap)."""

    items: list[TraceNode]
    next_cursor: str | None
    partial_index: bool


class RunSummary(BaseModel):
    """A run (an evaluation with stored traces) and its totals over its traces."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    first_trace_created_at: str
    last_trace_created_at: str
    last_trace_ingested_at: str
    trace_count: int
    episode_count: int
    avg_reward: float | None
    """Over scored traces only; null when none is scored."""
    step_min: int | None
    step_max: int | None
    step_count: int
    has_error: bool
    first_user_id: str | None
    environment_ids: list[str]
    model_ids: list[str]
    context: dict[str, str]


class RunListPage(BaseModel):
    """One page of runs, most recently ingested first."""

    items: list[RunSummary]
    next_cursor: str | None


class RunStep(BaseModel):
    step: int
    trace_count: int
    episode_count: int
    avg_reward: float | None


class RunStepList(BaseModel):
    """A run's training steps (evaluations have none)."""

    step_min: int | None
    step_max: int | None
    step_count: int
    items: list[RunStep]


class SearchMatch(BaseModel):
    """One node whose field holds the query (the first occurrence in it)."""

    trace_id: str
    upload_id: str
    generation: int
    episode_id: str | None
    node_idx: int
    role: str
    field: str
    representation: str
    """`text` (a string field) or `json` (searched in the field's JSON)."""
    match_start: int
    match_end: int
    excerpt: str
    excerpt_start: int


class SearchCoverage(BaseModel):
    examined_traces: int
    unindexed_trace_ids: list[str]
    partial_index: bool


class TraceSearchPage(BaseModel):
    """One page of matches; the first page carries `coverage`."""

    items: list[SearchMatch]
    next_cursor: str | None
    coverage: SearchCoverage | None = None


class TraceListPage(BaseModel):
    """One page of traces, newest first; pass `next_cursor` as `cursor` (null: the end)."""

    items: list[TraceSummary]
    next_cursor: str | None


class EpisodeListPage(BaseModel):
    """One page of episodes, newest first; pass `next_cursor` as `cursor` (null: the end)."""

    items: list[EpisodeSummary]
    next_cursor: str | None


def upload_request_schema() -> dict[str, Any]:
    """`openapi_extra` of `POST /traces`: its two multipart parts and its headers."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["metadata", "traces"],
                        "properties": {
                            "metadata": {
                                "type": "string",
                                "description": 'JSON: {"schema_version": 1, "context"?: '
                                "{str: str}}.",
                            },
                            "traces": {
                                "type": "string",
                                "format": "binary",
                                "description": "JSONL, one record per line; the part may "
                                "carry Content-Encoding: gzip.",
                            },
                        },
                    },
                    "encoding": {
                        "metadata": {"contentType": "application/json"},
                        "traces": {"contentType": "application/x-ndjson"},
                    },
                }
            },
        },
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "description": "sha256:<64 lowercase hex> of the uncompressed traces part.",
                "schema": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            },
            {
                "name": "X-Prime-Line-Format",
                "in": "header",
                "required": False,
                "description": "`episode` for episode lines; absent for trace lines.",
                "schema": {"type": "string", "enum": ["episode", "trace"]},
            },
            {
                "name": "X-Prime-Team-ID",
                "in": "header",
                "required": False,
                "description": "A team of the key's user; refused (403) for any other.",
                "schema": {"type": "string", "maxLength": 200},
            },
        ],
    }
