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
