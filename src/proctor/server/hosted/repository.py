"""Queries of the hosted domain: the launcher's queue and its guarded status changes.

Status changes are single guarded UPDATEs (`... WHERE status NOT IN terminal`), so a
launcher never overwrites a terminal status that the run, a user or another launcher set.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, null, select, update
from sqlalchemy.orm import Session

from proctor.server.db.models import (
    ApiKey,
    Evaluation,
    HostedEvaluation,
    HostedShard,
    SampleRow,
    User,
)


def get(session: Session, evaluation_id: str) -> tuple[HostedEvaluation, Evaluation] | None:
    """A hosted evaluation with its record."""
    row = session.execute(
        select(HostedEvaluation, Evaluation)
        .join(Evaluation, Evaluation.id == HostedEvaluation.evaluation_id)
        .where(HostedEvaluation.evaluation_id == evaluation_id)
    ).first()
    return None if row is None else (row[0], row[1])


def has_unclaimed(session: Session) -> bool:
    """Whether any PENDING hosted evaluation waits for a launcher."""
    found = session.execute(
        select(HostedEvaluation.evaluation_id)
        .join(Evaluation, Evaluation.id == HostedEvaluation.evaluation_id)
        .where(Evaluation.status == "PENDING", HostedEvaluation.launcher_id.is_(None))
        .limit(1)
    ).first()
    return found is not None


def claim_pending(
    session: Session, launcher_id: str, limit: int, now: datetime
) -> list[tuple[HostedEvaluation, Evaluation]]:
    """Take up to `limit` unclaimed PENDING evaluations for this launcher, oldest first.

    On PostgreSQL the rows are locked with `FOR UPDATE SKIP LOCKED`, so launchers sharing the
    database never take the same row; SQLite has one writer at a time, which is as safe.
    """
    if limit <= 0:
        return []
    rows = session.execute(
        select(HostedEvaluation, Evaluation)
        .join(Evaluation, Evaluation.id == HostedEvaluation.evaluation_id)
        .where(
            Evaluation.status == "PENDING",
            HostedEvaluation.launcher_id.is_(None),
            HostedEvaluation.ended_at.is_(None),
        )
        .order_by(HostedEvaluation.created_at)
        .limit(limit)
        .with_for_update(of=HostedEvaluation, skip_locked=True)
    ).all()
    claimed = []
    for hosted, evaluation in rows:
        hosted.launcher_id = launcher_id
        hosted.claimed_at = now
        hosted.heartbeat_at = now
        hosted.attempt += 1
        claimed.append((hosted, evaluation))
    session.flush()
    return claimed


def active_of(session: Session, launcher_id: str) -> list[tuple[HostedEvaluation, Evaluation]]:
    """The evaluations this launcher holds and has not closed, locked (on PostgreSQL) so that
    one another launcher is adopting right now is either adopted or kept, not both."""
    rows = session.execute(
        select(HostedEvaluation, Evaluation)
        .join(Evaluation, Evaluation.id == HostedEvaluation.evaluation_id)
        .where(HostedEvaluation.launcher_id == launcher_id, HostedEvaluation.ended_at.is_(None))
        .with_for_update(of=HostedEvaluation)
    ).all()
    return [(h, e) for h, e in rows]


def watch_states(session: Session, evaluation_ids: list[str]) -> dict[str, tuple[str, bool]]:
    """`{evaluation id: (status, cancel requested)}` for the sandboxes a launcher watches."""
    rows = session.execute(
        select(Evaluation.id, Evaluation.status, HostedEvaluation.cancel_requested)
        .join(HostedEvaluation, HostedEvaluation.evaluation_id == Evaluation.id)
        .where(Evaluation.id.in_(evaluation_ids))
    ).all()
    return {row[0]: (row[1], bool(row[2])) for row in rows}


def abandoned(
    session: Session, stale_before: datetime, launcher_id: str
) -> list[tuple[HostedEvaluation, Evaluation]]:
    """Claimed, unclosed evaluations whose launcher stopped heartbeating; locked for takeover."""
    rows = session.execute(
        select(HostedEvaluation, Evaluation)
        .join(Evaluation, Evaluation.id == HostedEvaluation.evaluation_id)
        .where(
            HostedEvaluation.ended_at.is_(None),
            HostedEvaluation.launcher_id.is_not(None),
            HostedEvaluation.launcher_id != launcher_id,
            HostedEvaluation.heartbeat_at < stale_before,
        )
        .with_for_update(of=HostedEvaluation, skip_locked=True)
    ).all()
    return [(h, e) for h, e in rows]


def heartbeat(session: Session, launcher_id: str, now: datetime) -> None:
    """Mark every open evaluation of this launcher as still looked after."""
    session.execute(
        update(HostedEvaluation)
        .where(HostedEvaluation.launcher_id == launcher_id, HostedEvaluation.ended_at.is_(None))
        .values(heartbeat_at=now)
    )


def drop_secrets(session: Session, evaluation_id: str) -> None:
    """Delete a sandbox's secrets (SQL NULL, not a JSON null) once it no longer needs them."""
    session.flush()
    session.execute(
        update(HostedEvaluation)
        .where(HostedEvaluation.evaluation_id == evaluation_id)
        .values(secrets=null())
        .execution_options(synchronize_session=False)
    )


def revoke_scoped_keys(session: Session, evaluation_id: str, now: datetime) -> None:
    """Revoke the keys minted for a sandbox once it has ended."""
    session.execute(
        update(ApiKey)
        .where(ApiKey.scope_evaluation_id == evaluation_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def evaluation(session: Session, evaluation_id: str) -> Evaluation | None:
    """The evaluation record, fresh from the database."""
    return session.execute(
        select(Evaluation)
        .where(Evaluation.id == evaluation_id)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def count_users(session: Session) -> int:
    """How many users the server has (one is a single-user server)."""
    return int(session.scalar(select(func.count()).select_from(User)) or 0)


def shards_of(session: Session, evaluation_id: str) -> list[HostedShard]:
    """The shard rows of a sharded hosted evaluation, by index (none when unsharded)."""
    return list(
        session.scalars(
            select(HostedShard)
            .where(HostedShard.evaluation_id == evaluation_id)
            .order_by(HostedShard.shard)
        )
    )


def samples_per_shard(
    session: Session, evaluation_id: str, *, count: int, rollouts: int
) -> dict[int, int]:
    """`{shard: samples stored}`: the pair at plan position `example * rollouts + rollout - 1`
    belongs to shard `position % count` (round robin, as `--shard` slices the plan)."""
    position = SampleRow.example_id * rollouts + SampleRow.rollout_number - 1
    shard = (position % count).label("shard")
    rows = session.execute(
        select(shard, func.count())
        .where(
            SampleRow.evaluation_id == evaluation_id,
            SampleRow.example_id.is_not(None),
            SampleRow.rollout_number.is_not(None),
        )
        .group_by(shard)
    ).all()
    return {int(r[0] or 0): int(r[1]) for r in rows}
