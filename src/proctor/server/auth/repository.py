"""Queries on users, teams, memberships and API keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from proctor.server.db.models import ApiKey, Team, TeamMember, User

# Built once: this query runs on every request, and building it costs as much as running it.
_KEY_IDENTITY = (
    select(
        ApiKey.id,
        ApiKey.revoked_at,
        ApiKey.is_admin,
        ApiKey.scope_evaluation_id,
        User.id,
        User.name,
        TeamMember.team_id,
    )
    .join(User, User.id == ApiKey.user_id)
    .outerjoin(TeamMember, TeamMember.user_id == User.id)
    .where(ApiKey.key_hash == bindparam("key_hash"))
)


@dataclass(frozen=True)
class KeyIdentity:
    """What authentication needs to know about a key, read as plain columns."""

    key_id: str
    revoked: bool
    is_admin: bool
    scope_evaluation_id: str | None
    user_id: str
    user_name: str
    team_ids: tuple[str, ...]


def key_identity(session: Session, key_hash: str) -> KeyIdentity | None:
    """The key with this hash, its user and the user's teams, in one query; or None.

    Selects columns rather than entities: this runs on every request, and building ORM
    objects would cost more than the query.
    """
    rows = session.execute(_KEY_IDENTITY, {"key_hash": key_hash}).all()
    if not rows:
        return None
    key_id, revoked_at, is_admin, scope, user_id, user_name, _ = rows[0]
    return KeyIdentity(
        key_id=key_id,
        revoked=revoked_at is not None,
        is_admin=bool(is_admin),
        scope_evaluation_id=scope,
        user_id=user_id,
        user_name=user_name,
        team_ids=tuple(row[6] for row in rows if row[6] is not None),
    )


def team_ids_of(session: Session, user_id: str) -> list[str]:
    """Ids of the teams the user belongs to."""
    return list(session.scalars(select(TeamMember.team_id).where(TeamMember.user_id == user_id)))


def count_keys(session: Session) -> int:
    """How many API keys exist (revoked ones included)."""
    return int(session.scalar(select(func.count()).select_from(ApiKey)) or 0)


def user_by_name(session: Session, name: str) -> User | None:
    """The user with this name, or None."""
    return session.scalar(select(User).where(User.name == name))


def user_by_id(session: Session, user_id: str) -> User | None:
    """The user with this id, or None."""
    return session.get(User, user_id)


def team_by_id(session: Session, team_id: str) -> Team | None:
    """The team with this id, or None."""
    return session.get(Team, team_id)


def teams_by_ids(session: Session, team_ids: Sequence[str]) -> list[Team]:
    """The teams with these ids, by id."""
    if not team_ids:
        return []
    return list(session.scalars(select(Team).where(Team.id.in_(team_ids)).order_by(Team.id)))


def memberships_of(session: Session, user_id: str) -> list[tuple[Team, TeamMember]]:
    """The user's teams with their membership rows, by team id."""
    rows = session.execute(
        select(Team, TeamMember)
        .join(TeamMember, TeamMember.team_id == Team.id)
        .where(TeamMember.user_id == user_id)
        .order_by(Team.id)
    ).all()
    return [(team, member) for team, member in rows]


def list_teams(session: Session) -> list[Team]:
    """Every team, by id."""
    return list(session.scalars(select(Team).order_by(Team.id)))


def membership(session: Session, team_id: str, user_id: str) -> TeamMember | None:
    """The membership row, or None."""
    return session.get(TeamMember, (team_id, user_id))


def members_of(session: Session, team_id: str) -> list[tuple[TeamMember, User]]:
    """Memberships of a team with their users, by user name."""
    rows = session.execute(
        select(TeamMember, User)
        .join(User, User.id == TeamMember.user_id)
        .where(TeamMember.team_id == team_id)
        .order_by(User.name)
    )
    return [(m, u) for m, u in rows]


def list_keys(session: Session) -> list[tuple[ApiKey, User]]:
    """Every key with its user, oldest first."""
    rows = session.execute(
        select(ApiKey, User).join(User, User.id == ApiKey.user_id).order_by(ApiKey.created_at)
    )
    return [(k, u) for k, u in rows]


def key_by_id(session: Session, key_id: str) -> ApiKey | None:
    """The key with this id (a primary-key lookup)."""
    return session.get(ApiKey, key_id)


def keys_matching(session: Session, ref: str) -> list[ApiKey]:
    """Keys whose id, or displayed prefix, equals `ref`."""
    return list(session.scalars(select(ApiKey).where((ApiKey.id == ref) | (ApiKey.prefix == ref))))


def touch_key(session: Session, key_id: str, when: datetime) -> None:
    """Record that the key was used at `when`."""
    session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=when))
