"""The rules of the traces service: who may write an upload, replays, closed evaluations,
and the samples built from episode records.

An upload is one transaction. Its evaluations (each line's `run.id`) are locked in id order
and checked writable; a replay of committed bytes answers the same receipt and stores
nothing; new records for a closed evaluation are refused 409 like new samples are; then
every record is stored and each episode's sample goes through the samples endpoint's own
ingest (`evaluations.samples.append_samples`: idempotent by sample id, counters in the same
transaction, statistics only through finalize).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from proctor import projection
from proctor.contract import INGEST_CLOSED_STATUSES
from proctor.projection import encode
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import iso_utc, utcnow
from proctor.server.db.models import TraceRecord
from proctor.server.errors import Conflict, Forbidden, NotVisible, ScopeDenied
from proctor.server.evaluations import repository as evaluations
from proctor.server.evaluations import samples
from proctor.server.evaluations.service import get_visible
from proctor.server.request_body import JsonObjectBody
from proctor.server.traces import repository
from proctor.server.traces.upload import Line, Upload

INT64 = 2**63


def _writable(session: Session, principal: Principal, run_id: str) -> None:
    """Lock the evaluation `run_id` names and check this key may write it."""
    try:
        get_visible(session, principal, run_id, write=True, for_update=True)
    except ScopeDenied:
        raise Forbidden(
            f"This key may not write evaluation {run_id!r}; use a key for that evaluation.",
            code="forbidden",
        ) from None
    except NotVisible:
        raise NotVisible(
            f"No evaluation with id {run_id!r} is visible to this key; stamp the records with "
            "the id of an evaluation this key can write.",
            code="run_not_found",
        ) from None
    except Forbidden as e:
        raise Forbidden(e.message, code="forbidden") from None


def commit_upload(session: Session, principal: Principal, upload: Upload) -> str:
    """Store a validated upload; returns its `upload_id` (the content digest).

    Raises:
        Forbidden: (403 `forbidden`) a record names an evaluation this key may not write.
        NotVisible: (404 `run_not_found`) a record names an evaluation this key cannot see.
        Conflict: (409) a replay with another line format (`line_format_conflict`), or new
            records for an evaluation that takes no more (`evaluation_closed`).
    """
    by_run: dict[str, list[Line]] = {}
    for line in upload.lines:
        by_run.setdefault(line.run_id, []).append(line)
    for run_id in upload.run_ids():
        _writable(session, principal, run_id)
    committed = repository.find_upload(session, principal.user_id, upload.digest)
    if committed is not None:
        if committed.line_format != upload.line_format:
            raise Conflict(
                f"These bytes were committed as {committed.line_format} lines; send them with "
                "the same X-Prime-Line-Format.",
                code="line_format_conflict",
            )
        return upload.digest
    now = utcnow()
    for run_id, lines in by_run.items():
        _store_run(session, principal, run_id, lines, upload, now)
    repository.add_upload(
        session,
        {
            "user_id": principal.user_id,
            "digest": upload.digest,
            "line_format": upload.line_format,
            "context": upload.context,
            "lines": len(upload.lines),
            "created_at": now,
        },
    )
    return upload.digest


def _store_run(
    session: Session,
    principal: Principal,
    run_id: str,
    lines: list[Line],
    upload: Upload,
    now: datetime,
) -> None:
    kind = "episode" if upload.line_format == "episode" else "trace"
    ids = [line.record_id for line in lines]
    stored = repository.stored_record_ids(session, run_id, kind, ids)
    evaluation = evaluations.get(session, run_id)
    assert evaluation is not None  # locked by `_writable`
    if evaluation.status in INGEST_CLOSED_STATUSES and len(stored) < len(set(ids)):
        raise Conflict(
            f"Evaluation {run_id} is {evaluation.status}; it takes no more records.",
            code="evaluation_closed",
        )
    fresh = [line for line in lines if line.record_id not in stored]
    rows: list[dict[str, Any]] = []
    for line in fresh:
        rows.extend(_rows(line, kind, run_id, upload, now))
    repository.insert_records(session, rows)
    _append_samples(session, principal, run_id, fresh, kind)


def _rows(
    line: Line, kind: str, run_id: str, upload: Upload, now: datetime
) -> list[dict[str, Any]]:
    base = {"evaluation_id": run_id, "upload_digest": upload.digest, "created_at": now}
    if kind == "trace":
        return [
            {
                **base,
                "kind": "trace",
                "record_id": line.record_id,
                "episode_id": _text(line.record.get("episode_id")),
                "summary": trace_summary(line.record, None, upload.context),
                "size_bytes": len(line.raw.encode("utf-8")),
                "data": line.raw,
            }
        ]
    rows = [
        {
            **base,
            "kind": "episode",
            "record_id": line.record_id,
            "episode_id": line.record_id,
            "summary": episode_summary(line.record, upload.context),
            "size_bytes": len(line.raw.encode("utf-8")),
            "data": line.raw,
        }
    ]
    for member in line.members:
        rows.append(
            {
                **base,
                "kind": "trace",
                "record_id": member["id"],
                "episode_id": line.record_id,
                "summary": trace_summary(member, line.record, upload.context),
                "size_bytes": len(encode(member).encode("utf-8")),
                "data": None,  # inside its episode's line
            }
        )
    return rows


def _append_samples(
    session: Session, principal: Principal, run_id: str, lines: list[Line], kind: str
) -> None:
    """Build the samples the public client would have posted and ingest them."""
    rows: list[dict[str, Any]] = []
    if kind == "trace":
        # A v0 sample row logged as a record is posted as it is, without the run stamp.
        rows = [
            {k: v for k, v in line.record.items() if k != "run"}
            for line in lines
            if "sample_id" in line.record
        ]
    else:
        examples = [e for line in lines if (e := projection.example_of(line.record)) is not None]
        counts = evaluations.example_counts(
            session, run_id, [e for e in examples if -INT64 < e < INT64]
        )
        for line in lines:
            example = projection.example_of(line.record)
            number = counts.get(example, 0) + 1 if example is not None else 1
            projected = projection.project_episode(line.record, number)  # [] : no sample
            if example is not None and projected:
                counts[example] = number
            rows.extend(_storable(sample) for sample in projected)
    if not rows:
        return
    body = JsonObjectBody(value={"samples": rows}, items_raw=[encode(row) for row in rows])
    samples.append_samples(session, principal, run_id, body)


def _storable(sample: dict[str, Any]) -> dict[str, Any]:
    """The sample with what the sample table refuses made null, as the client does."""
    sample = _nullify_non_finite(sample)
    example = sample.get("example_id")
    if isinstance(example, int) and not -INT64 < example < INT64:
        sample["example_id"] = None
    return sample


def _nullify_non_finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nullify_non_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nullify_non_finite(v) for v in value]
    return value


# --- summaries -------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) and "\x00" not in value else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _reward(trace: dict[str, Any]) -> float | None:
    total, scored = 0.0, False
    for entry in _dict(trace.get("rewards")).values():
        entry = _dict(entry)
        score, weight = _finite(entry.get("score")), _finite(entry.get("weight", 1.0))
        if score is not None and weight is not None:
            total, scored = total + score * weight, True
    if not scored:
        return _finite(trace.get("reward"))
    return total if math.isfinite(total) else None


def _timing(trace: dict[str, Any]) -> tuple[str | None, int]:
    """The trace's start (ISO) and its duration in milliseconds, from `timing`."""
    timing = _dict(trace.get("timing"))
    start = _finite(timing.get("start"))
    ends = [
        end
        for span in timing.values()
        if isinstance(span, dict) and (end := _finite(span.get("end"))) is not None
    ]
    created = None
    if start is not None and 0 <= start < 1e11:
        created = datetime.fromtimestamp(start, UTC).isoformat()
    duration = 0
    if start is not None and ends and max(ends) > start:
        duration = min(int((max(ends) - start) * 1000), INT64 - 1)
    return created, duration


def trace_summary(
    trace: dict[str, Any], episode: dict[str, Any] | None, context: dict[str, str]
) -> dict[str, Any]:
    """The listing columns of one trace (`TraceSummary` less what the row itself holds)."""
    calls = [c for c in trace.get("calls") or [] if isinstance(c, dict)]
    usages = [_dict(c.get("usage")) for c in calls]
    total_tokens = sum(
        v
        for u in usages
        for key in ("prompt_tokens", "cached_input_tokens", "completion_tokens")
        if isinstance(v := u.get(key), int) and not isinstance(v, bool)
    )
    model = next((c["model"] for c in calls if isinstance(c.get("model"), str)), None)
    errors = trace.get("errors")
    created, duration = _timing(trace)
    env = _dict((episode or trace).get("env"))
    agent = _dict(trace.get("agent"))
    return {
        "created_at": created,
        "environment_id": _text(env.get("id")),
        "model": {"provider": None, "id": _text(model)},
        "task_id": _text(_dict(trace.get("task")).get("key")),
        "agent_name": _text(agent.get("name")),
        "score": {"reward": _reward(trace), "outcome": None},
        "execution": {
            "has_error": bool(errors) or trace.get("ok") is False,
            "is_truncated": projection.is_truncated(trace, calls),
        },
        "duration_ms": duration,
        "total_tokens": min(total_tokens, INT64 - 1),
        "context": context,
    }


def episode_summary(episode: dict[str, Any], context: dict[str, str]) -> dict[str, Any]:
    """The listing columns of one episode."""
    errors = [e for e in episode.get("errors") or [] if isinstance(e, dict)]
    last = errors[-1] if errors else {}
    created, _ = _timing(_dict((episode.get("traces") or [{}])[0]) if episode.get("traces") else {})
    return {
        "created_at": created,
        "environment_id": _text(_dict(episode.get("env")).get("id")),
        "outcome": None,
        "has_error": bool(errors) or episode.get("ok") is False,
        "error": {"type": _text(last.get("type")), "message": _text(last.get("message"))},
        "trace_count": len(episode.get("traces") or []),
        "context": context,
    }


# --- reads -----------------------------------------------------------------------------


def _summary_of(row: TraceRecord) -> dict[str, Any]:
    summary = dict(row.summary or {})
    ingested = iso_utc(row.created_at)
    summary.update(
        upload_id=row.upload_digest,
        episode_id=row.episode_id,
        run_id=row.evaluation_id,
        ingested_at=ingested,
        size_bytes=row.size_bytes,
    )
    summary["created_at"] = summary.get("created_at") or ingested
    if row.kind == "trace":
        summary["trace_id"] = row.record_id
    else:
        summary["schema_version"] = 1
    return summary


def raw_document(session: Session, row: TraceRecord) -> str:
    """The record as sent: its line, or for a member trace its object inside the episode."""
    if row.data is not None:
        return row.data
    episode = repository.episode_record(session, row.evaluation_id, row.episode_id or "")
    if episode is not None and episode.data is not None:
        for member in json.loads(episode.data).get("traces") or []:
            if isinstance(member, dict) and str(member.get("id")) == row.record_id:
                return encode(member)
    return "{}"


def _not_found(kind: str, record_id: str) -> NotVisible:
    return NotVisible(
        f"No {kind} with id {record_id!r} is visible to this key; check the id and key.",
        code=f"{kind}_not_found",
    )


def get_record(
    session: Session,
    principal: Principal,
    kind: str,
    record_id: str,
    *,
    evaluation_id: str | None = None,
) -> TraceRecord:
    """The newest record of `kind` with this id the key may read, in `evaluation_id` when
    given (404 `<kind>_not_found`)."""
    row = repository.readable_record(
        session,
        principal,
        kind=kind,
        record_id=record_id,
        evaluation_id=evaluation_id or principal.scope_evaluation_id,
    )
    if row is None:
        raise _not_found(kind, record_id)
    return row


def trace_document(
    session: Session, principal: Principal, evaluation_id: str, trace_id: str
) -> str:
    """One trace of an evaluation, as uploaded (what the dashboard's sample page links)."""
    get_visible(session, principal, evaluation_id)
    row = get_record(session, principal, "trace", trace_id, evaluation_id=evaluation_id)
    return raw_document(session, row)


def summary(row: TraceRecord) -> dict[str, Any]:
    """The public summary of a record row."""
    return _summary_of(row)


def list_records(
    session: Session,
    principal: Principal,
    *,
    kind: str,
    run_id: str | None,
    episode_id: str | None,
    cursor: int | None,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of summaries, newest first, and the cursor of the next (None at the end)."""
    if run_id is not None:
        try:
            get_visible(session, principal, run_id)
        except (NotVisible, ScopeDenied):
            raise NotVisible(
                f"No run with id {run_id!r} is visible to this key; check the id and key.",
                code="run_not_found",
            ) from None
    run_id = run_id or principal.scope_evaluation_id
    rows = repository.record_page(
        session,
        principal,
        kind=kind,
        evaluation_id=run_id,
        episode_id=episode_id,
        before=cursor,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = str(rows[-1].id) if more and rows else None
    return [_summary_of(row) for row in rows], next_cursor


def sample_traces(
    session: Session, evaluation_id: str, episode_id: str
) -> list[tuple[dict[str, Any], str]]:
    """The traces stored for one sample's episode (the evaluation is already checked
    readable): each one's summary and its document, for the dashboard's sample page."""
    return [
        (_summary_of(row), raw_document(session, row))
        for row in repository.traces_of_episode(session, evaluation_id, episode_id)
    ]
