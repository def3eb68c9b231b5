"""Queries on trace uploads and records; the only place that builds them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Evaluation, TraceRecord, TraceUpload
from proctor.server.evaluations.repository import readable


def _insert(session: Session) -> Any:
    dialect = session.get_bind().dialect.name
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


def find_upload(session: Session, user_id: str, digest: str) -> TraceUpload | None:
    """The user's committed upload with this content digest, if any."""
    return session.scalar(
        select(TraceUpload).where(TraceUpload.user_id == user_id, TraceUpload.digest == digest)
    )


def add_upload(session: Session, values: dict[str, Any]) -> None:
    """Record a committed upload (a concurrent twin already recorded it: nothing happens)."""
    table = TraceUpload.metadata.tables["trace_uploads"]
    statement = _insert(session)(table).on_conflict_do_nothing(index_elements=["user_id", "digest"])
    session.connection().execute(statement, [values])


def insert_records(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert record rows, skipping any `(evaluation_id, kind, record_id)` already stored."""
    if not rows:
        return
    table = TraceRecord.metadata.tables["trace_records"]
    statement = _insert(session)(table).on_conflict_do_nothing(
        index_elements=["evaluation_id", "kind", "record_id"]
    )
    # Chunks keep one statement within every database's parameter limit.
    for start in range(0, len(rows), 200):
        session.connection().execute(statement, rows[start : start + 200])


def stored_record_ids(
    session: Session, evaluation_id: str, kind: str, ids: Sequence[str]
) -> set[str]:
    """Which of `ids` (records of `kind`) the evaluation already holds."""
    found: set[str] = set()
    for start in range(0, len(ids), 500):
        found.update(
            session.scalars(
                select(TraceRecord.record_id).where(
                    TraceRecord.evaluation_id == evaluation_id,
                    TraceRecord.kind == kind,
                    TraceRecord.record_id.in_(list(ids[start : start + 500])),
                )
            )
        )
    return found


def record_page(
    session: Session,
    principal: Principal,
    *,
    kind: str,
    evaluation_id: str | None,
    episode_id: str | None,
    before: int | None,
    limit: int,
) -> list[TraceRecord]:
    """Records of `kind` the principal may read, newest first, with ids below `before`."""
    query = (
        select(TraceRecord)
        .join(Evaluation, Evaluation.id == TraceRecord.evaluation_id)
        .where(TraceRecord.kind == kind, readable(principal))
    )
    if evaluation_id is not None:
        query = query.where(TraceRecord.evaluation_id == evaluation_id)
    if episode_id is not None:
        query = query.where(TraceRecord.episode_id == episode_id)
    if before is not None:
        query = query.where(TraceRecord.id < before)
    return list(session.scalars(query.order_by(TraceRecord.id.desc()).limit(limit)))


def readable_record(
    session: Session,
    principal: Principal,
    *,
    kind: str,
    record_id: str,
    evaluation_id: str | None = None,
) -> TraceRecord | None:
    """The newest readable record of `kind` with this id (ids are unique per evaluation)."""
    query = (
        select(TraceRecord)
        .join(Evaluation, Evaluation.id == TraceRecord.evaluation_id)
        .where(TraceRecord.kind == kind, TraceRecord.record_id == record_id, readable(principal))
    )
    if evaluation_id is not None:
        query = query.where(TraceRecord.evaluation_id == evaluation_id)
    return session.scalar(query.order_by(TraceRecord.id.desc()).limit(1))


def episode_record(session: Session, evaluation_id: str, episode_id: str) -> TraceRecord | None:
    """The episode row of an evaluation (where its member traces' JSON lives)."""
    return session.scalar(
        select(TraceRecord).where(
            TraceRecord.evaluation_id == evaluation_id,
            TraceRecord.kind == "episode",
            TraceRecord.record_id == episode_id,
        )
    )


def traces_of_episode(session: Session, evaluation_id: str, episode_id: str) -> list[TraceRecord]:
    """The trace rows of one episode of an evaluation, in upload order."""
    return list(
        session.scalars(
            select(TraceRecord)
            .where(
                TraceRecord.evaluation_id == evaluation_id,
                TraceRecord.kind == "trace",
                TraceRecord.episode_id == episode_id,
            )
            .order_by(TraceRecord.id)
        )
    )
