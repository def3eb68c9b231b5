"""The traces service's reads beyond listing: an episode with its member-trace aggregate and
its traces, a trace's message nodes, runs with their totals, and literal search in a run.

They follow the public traces client (prime-traces 0.0.10): pages are `{items, next_cursor}`,
a run is an evaluation with stored traces, and every read goes through the evaluations'
visibility rule, so another team's runs, episodes and traces answer 404 like unknown ones.
There is no separate node index: nodes and search read the stored documents, so nothing is
ever "not indexed yet" (`partial_index` is false, coverage lists no unindexed trace).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from proctor.projection import encode
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import iso_utc
from proctor.server.db.models import Evaluation, TraceRecord
from proctor.server.errors import BadRequest, NotVisible, ScopeDenied
from proctor.server.evaluations.repository import readable
from proctor.server.evaluations.service import get_visible
from proctor.server.traces import repository, service

SEARCH_FIELDS = ("content", "reasoning_content", "tool_calls")
EXCERPT_CONTEXT = 60
"""Characters shown on each side of a search match."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- episodes ----------------------------------------------------------------------------


def episode_detail(session: Session, principal: Principal, episode_id: str) -> dict[str, Any]:
    """An episode's own summary plus the aggregate of its member traces."""
    row = service.get_record(session, principal, "episode", episode_id)
    members = [
        _dict(m.summary)
        for m in repository.traces_of_episode(session, row.evaluation_id, row.record_id)
    ]
    detail = service.summary(row)
    detail["traces"] = {
        "trace_count": len(members),
        "total_tokens": sum(_int(m.get("total_tokens")) for m in members),
        "total_duration_ms": sum(_int(m.get("duration_ms")) for m in members),
        "any_trace_error": any(_dict(m.get("execution")).get("has_error") for m in members),
        "agent_names": sorted(
            {str(m["agent_name"]) for m in members if isinstance(m.get("agent_name"), str)}
        ),
    }
    return detail


def episode_traces(
    session: Session, principal: Principal, episode_id: str, *, cursor: int | None, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of an episode's member traces, newest first."""
    row = service.get_record(session, principal, "episode", episode_id)
    rows = repository.record_page(
        session,
        principal,
        kind="trace",
        evaluation_id=row.evaluation_id,
        episode_id=row.record_id,
        before=cursor,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return [service.summary(r) for r in rows], str(rows[-1].id) if more and rows else None


# --- nodes -------------------------------------------------------------------------------


def _nodes(document: str) -> list[dict[str, Any]]:
    try:
        trace = json.loads(document)
    except ValueError:
        return []
    return [n for n in _dict(trace).get("nodes") or [] if isinstance(n, dict)]


def _node(index: int, node: dict[str, Any]) -> dict[str, Any]:
    message = dict(_dict(node.get("message")))
    message.setdefault("role", None)
    parent = node.get("parent")
    stamp = node.get("timestamp")
    return {
        "node_idx": index,
        "parent_idx": parent if isinstance(parent, int) and not isinstance(parent, bool) else None,
        "timestamp": stamp
        if isinstance(stamp, int | float) and not isinstance(stamp, bool)
        else None,
        "sampled": bool(node.get("sampled")),
        "message": message,
    }


def trace_nodes(
    session: Session,
    principal: Principal,
    trace_id: str,
    *,
    roles: list[str],
    sampled: bool | None,
    after: int | None,
    cursor: int | None,
    limit: int,
) -> dict[str, Any]:
    """One page of a trace's message nodes in step order."""
    if after is not None and cursor is not None:
        raise BadRequest("Pass either after or cursor, not both.", code="invalid_filter")
    row = service.get_record(session, principal, "trace", trace_id)
    nodes = _nodes(service.raw_document(session, row))
    start = cursor if cursor is not None else (after + 1 if after is not None else 0)
    items: list[dict[str, Any]] = []
    index = start
    while index < len(nodes) and len(items) < limit:
        node = nodes[index]
        role = _dict(node.get("message")).get("role")
        if (not roles or role in roles) and (
            sampled is None or bool(node.get("sampled")) == sampled
        ):
            items.append(_node(index, node))
        index += 1
    more = index < len(nodes)
    return {"items": items, "next_cursor": str(index) if more else None, "partial_index": False}


# --- runs --------------------------------------------------------------------------------


def _run_not_found(run_id: str) -> NotVisible:
    return NotVisible(
        f"No run with id {run_id!r} is visible to this key; check the id and key.",
        code="run_not_found",
    )


def _visible_run(session: Session, principal: Principal, run_id: str) -> Evaluation:
    try:
        return get_visible(session, principal, run_id)
    except (NotVisible, ScopeDenied):
        raise _run_not_found(run_id) from None


def _when(text: Any, fallback: datetime) -> str:
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text).isoformat()
        except ValueError:
            pass
    return iso_utc(fallback) or ""


def _run_summary(session: Session, evaluation: Evaluation) -> dict[str, Any] | None:
    rows = session.execute(
        select(TraceRecord.id, TraceRecord.episode_id, TraceRecord.summary, TraceRecord.created_at)
        .where(TraceRecord.evaluation_id == evaluation.id, TraceRecord.kind == "trace")
        .order_by(TraceRecord.id)
    ).all()
    if not rows:
        return None
    summaries = [_dict(r.summary) for r in rows]
    created = sorted(
        _when(s.get("created_at"), r.created_at) for s, r in zip(summaries, rows, strict=True)
    )
    rewards = [
        float(reward)
        for s in summaries
        if isinstance(reward := _dict(s.get("score")).get("reward"), int | float)
        and not isinstance(reward, bool)
    ]
    newest = summaries[-1]
    return {
        "run_id": evaluation.id,
        "first_trace_created_at": created[0],
        "last_trace_created_at": created[-1],
        "last_trace_ingested_at": iso_utc(max(r.created_at for r in rows)),
        "trace_count": len(rows),
        "episode_count": len({r.episode_id for r in rows if r.episode_id is not None}),
        "avg_reward": sum(rewards) / len(rewards) if rewards else None,
        "step_min": None,
        "step_max": None,
        "step_count": 0,
        "has_error": any(_dict(s.get("execution")).get("has_error") for s in summaries),
        "first_user_id": evaluation.user_id,
        "environment_ids": sorted(
            {str(e) for s in summaries if isinstance(e := s.get("environment_id"), str)}
        ),
        "model_ids": sorted(
            {str(m) for s in summaries if isinstance(m := _dict(s.get("model")).get("id"), str)}
        ),
        "context": {str(k): str(v) for k, v in _dict(newest.get("context")).items()},
        "name": evaluation.name,
    }


def run_summary(session: Session, principal: Principal, run_id: str) -> dict[str, Any]:
    """One run's totals over its traces (404 `run_not_found` when it holds none)."""
    summary = _run_summary(session, _visible_run(session, principal, run_id))
    if summary is None:
        raise _run_not_found(run_id)
    return summary


def run_steps(session: Session, principal: Principal, run_id: str) -> dict[str, Any]:
    """A run's training steps: evaluations have none."""
    _visible_run(session, principal, run_id)
    return {"step_min": None, "step_max": None, "step_count": 0, "items": []}


def list_runs(
    session: Session,
    principal: Principal,
    *,
    run_types: Sequence[str],
    created_by: list[str],
    cursor: int | None,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """Runs (evaluations with traces) the key may read, most recently ingested first."""
    if run_types and "eval" not in run_types:
        return [], None  # every stored run is an evaluation
    last = func.max(TraceRecord.id).label("last")
    query = (
        select(TraceRecord.evaluation_id, last)
        .join(Evaluation, Evaluation.id == TraceRecord.evaluation_id)
        .where(TraceRecord.kind == "trace", readable(principal))
        .group_by(TraceRecord.evaluation_id)
    )
    if principal.scope_evaluation_id is not None:
        query = query.where(TraceRecord.evaluation_id == principal.scope_evaluation_id)
    if created_by:
        query = query.where(Evaluation.user_id.in_(created_by))
    if cursor is not None:
        query = query.having(last < cursor)
    found = session.execute(query.order_by(last.desc()).limit(limit + 1)).all()
    more = len(found) > limit
    found = found[:limit]
    items = []
    for evaluation_id, _ in found:
        evaluation = session.get(Evaluation, evaluation_id)
        summary = None if evaluation is None else _run_summary(session, evaluation)
        if summary is not None:
            items.append(summary)
    return items, str(found[-1][1]) if more and found else None


# --- search ------------------------------------------------------------------------------


def _documents(session: Session, rows: list[TraceRecord]) -> Iterator[tuple[TraceRecord, str]]:
    """Each trace row with its document, reading each episode line once."""
    episodes: dict[str, dict[str, str]] = {}
    for row in rows:
        if row.data is not None:
            yield row, row.data
            continue
        key = row.episode_id or ""
        if key not in episodes:
            members: dict[str, str] = {}
            episode = repository.episode_record(session, row.evaluation_id, key)
            if episode is not None and episode.data is not None:
                for member in _dict(json.loads(episode.data)).get("traces") or []:
                    if isinstance(member, dict):
                        members[str(member.get("id"))] = encode(member)
            episodes[key] = members
        yield row, episodes[key].get(row.record_id, "{}")


def _wanted(
    summary: dict[str, Any], has_error: bool | None, low: float | None, high: float | None
) -> bool:
    if (
        has_error is not None
        and bool(_dict(summary.get("execution")).get("has_error")) != has_error
    ):
        return False
    if low is None and high is None:
        return True
    reward = _dict(summary.get("score")).get("reward")
    if not isinstance(reward, int | float) or isinstance(reward, bool):
        return False
    return (low is None or reward >= low) and (high is None or reward <= high)


def search_run(
    session: Session,
    principal: Principal,
    run_id: str,
    *,
    query: str,
    field: str,
    role: str | None,
    has_error: bool | None,
    reward_min: float | None,
    reward_max: float | None,
    cursor: int | None,
    limit: int,
) -> dict[str, Any]:
    """Case-sensitive literal matches of `query` in one field of a run's message nodes, one
    match per node, in upload order; a page of them and the cursor of the next."""
    if not query.strip() or not 3 <= len(query) <= 256:
        raise BadRequest(
            "query must be 3 to 256 characters of nonblank text; give a longer one.",
            code="invalid_filter",
        )
    if field not in SEARCH_FIELDS:
        raise BadRequest(
            f"field must be one of {', '.join(SEARCH_FIELDS)}; pick one.", code="invalid_filter"
        )
    _visible_run(session, principal, run_id)
    rows = [
        row
        for row in session.scalars(
            select(TraceRecord)
            .where(TraceRecord.evaluation_id == run_id, TraceRecord.kind == "trace")
            .order_by(TraceRecord.id)
        )
        if _wanted(_dict(row.summary), has_error, reward_min, reward_max)
    ]
    coverage = (
        {"examined_traces": len(rows), "unindexed_trace_ids": [], "partial_index": False}
        if cursor is None
        else None
    )
    skip = cursor or 0
    matches: list[dict[str, Any]] = []
    seen = 0
    for row, document in _documents(session, rows):
        for index, node in enumerate(_nodes(document)):
            message = _dict(node.get("message"))
            if role is not None and message.get("role") != role:
                continue
            value = message.get(field)
            if value is None:
                continue
            text, representation = (
                (value, "text") if isinstance(value, str) else (encode(value), "json")
            )
            start = text.find(query)
            if start < 0:
                continue
            seen += 1
            if seen <= skip:
                continue
            if len(matches) == limit:
                return {"items": matches, "next_cursor": str(skip + limit), "coverage": coverage}
            excerpt_start = max(0, start - EXCERPT_CONTEXT)
            matches.append(
                {
                    "trace_id": row.record_id,
                    "upload_id": row.upload_digest,
                    "generation": 0,
                    "episode_id": row.episode_id,
                    "node_idx": index,
                    "role": str(message.get("role") or ""),
                    "field": field,
                    "representation": representation,
                    "match_start": start,
                    "match_end": start + len(query),
                    "excerpt": text[excerpt_start : start + len(query) + EXCERPT_CONTEXT],
                    "excerpt_start": excerpt_start,
                }
            )
    return {"items": matches, "next_cursor": None, "coverage": coverage}
