"""Queries on evaluations and samples; the only place that builds them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import String, cast, func, or_, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Evaluation, Sample

# Keeps `IN (...)` lists and multi-row VALUES under SQLite's bound-parameter limit.
CHUNK = 500


def visible_to(principal: Principal) -> ColumnElement[bool]:
    """Filter for evaluations the principal may see: its user's, its teams', public ones."""
    if principal.is_admin:
        return true()
    clauses: list[ColumnElement[bool]] = [
        Evaluation.user_id == principal.user_id,
        Evaluation.is_public.is_(True),
    ]
    if principal.team_ids:
        clauses.append(Evaluation.team_id.in_(sorted(principal.team_ids)))
    return or_(*clauses)


def get(session: Session, evaluation_id: str, *, for_update: bool = False) -> Evaluation | None:
    """The evaluation with this id; `for_update` locks the row (PostgreSQL) until commit."""
    query = select(Evaluation).where(Evaluation.id == evaluation_id)
    if for_update:
        query = query.with_for_update()
    return session.scalar(query)


def add(session: Session, evaluation: Evaluation) -> Evaluation:
    """Insert an evaluation."""
    session.add(evaluation)
    session.flush()
    return evaluation


def list_visible(
    session: Session,
    principal: Principal,
    *,
    skip: int,
    limit: int,
    team_id: str | None = None,
    environment_name: str | None = None,
    suite_id: str | None = None,
    status: str | None = None,
) -> tuple[list[Evaluation], int]:
    """A page of visible evaluations, newest first, and the total matching."""
    conditions: list[ColumnElement[bool]] = [visible_to(principal)]
    if team_id is not None:
        conditions.append(Evaluation.team_id == team_id)
    if environment_name:
        names = cast(Evaluation.environment_names, String)
        conditions.append(names.contains(json.dumps(environment_name), autoescape=True))
    if suite_id:
        conditions.append(Evaluation.suite_id == suite_id)
    if status:
        conditions.append(Evaluation.status == status)
    total = session.scalar(select(func.count()).select_from(Evaluation).where(*conditions)) or 0
    rows = session.scalars(
        select(Evaluation)
        .where(*conditions)
        .order_by(Evaluation.created_at.desc(), Evaluation.id.desc())
        .offset(skip)
        .limit(limit)
    )
    return list(rows), int(total)


def ids_with_status(session: Session, status: str) -> list[str]:
    """Ids of every evaluation in `status`."""
    return list(session.scalars(select(Evaluation.id).where(Evaluation.status == status)))


def existing_sample_ids(
    session: Session, evaluation_id: str, sample_ids: Sequence[str]
) -> set[str]:
    """Which of `sample_ids` the evaluation already stores."""
    found: set[str] = set()
    for start in range(0, len(sample_ids), CHUNK):
        chunk = sample_ids[start : start + CHUNK]
        found.update(
            session.scalars(
                select(Sample.sample_id).where(
                    Sample.evaluation_id == evaluation_id, Sample.sample_id.in_(chunk)
                )
            )
        )
    return found


def insert_samples(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert sample rows, skipping any `(evaluation_id, sample_id)` already stored."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(Sample).on_conflict_do_nothing(index_elements=["evaluation_id", "sample_id"])
    for start in range(0, len(rows), CHUNK):
        session.execute(statement, rows[start : start + CHUNK])


def sample_page(session: Session, evaluation_id: str, first_seq: int, last_seq: int) -> list[str]:
    """Raw JSON of the samples with `first_seq <= seq <= last_seq`, in order."""
    return list(
        session.scalars(
            select(Sample.data)
            .where(
                Sample.evaluation_id == evaluation_id,
                Sample.seq >= first_seq,
                Sample.seq <= last_seq,
            )
            .order_by(Sample.seq)
        )
    )


def all_samples(session: Session, evaluation_id: str) -> Iterable[Sample]:
    """Every sample of an evaluation in order (for exports; streams rows)."""
    return session.scalars(
        select(Sample).where(Sample.evaluation_id == evaluation_id).order_by(Sample.seq)
    )
