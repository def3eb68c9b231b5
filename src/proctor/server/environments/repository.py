"""Queries on the environments and environment_versions tables."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, String, cast, false, func, or_, select, true
from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Environment, EnvironmentVersion

LISTED_KINDS = ("installed", "pushed")
"""Kinds the hub lists: what the platform can run (bare names recorded by runs are not)."""


def by_owner_and_name(session: Session, owner: str, name: str) -> Environment | None:
    """The environment `owner/name`, or None."""
    return session.scalar(
        select(Environment).where(Environment.owner == owner, Environment.name == name)
    )


def by_id(session: Session, env_id: str) -> Environment | None:
    """The environment with this id, or None."""
    return session.get(Environment, env_id)


def names_by_ids(session: Session, env_ids: Sequence[str]) -> dict[str, str]:
    """Map of id to name for the known ids among `env_ids`."""
    if not env_ids:
        return {}
    rows = session.execute(
        select(Environment.id, Environment.name).where(Environment.id.in_(list(env_ids)))
    )
    return {env_id: name for env_id, name in rows}


def add(session: Session, env: Environment) -> Environment:
    """Insert an environment."""
    session.add(env)
    session.flush()
    return env


def readable_by(principal: Principal) -> ColumnElement[bool]:
    """Filter for environments the principal may see (the rule of evaluations)."""
    if principal.is_admin:
        return true()
    clauses: list[ColumnElement[bool]] = [
        Environment.visibility == "PUBLIC",
        Environment.user_id == principal.user_id,
    ]
    if principal.team_ids:
        clauses.append(Environment.team_id.in_(sorted(principal.team_ids)))
    return or_(*clauses)


def page(
    session: Session,
    principal: Principal,
    *,
    offset: int,
    limit: int,
    owner: str | None,
    visibility: str | None,
    search: str | None,
    tags: Sequence[str],
    mine_only: bool,
    include_teams: bool,
    sort_by: str,
    descending: bool,
) -> tuple[list[Environment], int]:
    """A page of the listed environments the principal may see, and the total matching."""
    conditions: list[ColumnElement[bool]] = [
        readable_by(principal),
        Environment.kind.in_(LISTED_KINDS),
    ]
    if owner:
        conditions.append(Environment.owner == owner)
    if visibility:
        conditions.append(Environment.visibility == visibility)
    if search:
        pattern = f"%{search.lower()}%"
        conditions.append(
            or_(
                func.lower(Environment.name).like(pattern),
                func.lower(func.coalesce(Environment.description, "")).like(pattern),
            )
        )
    for tag in tags:
        conditions.append(cast(Environment.tags, String).contains(f'"{tag}"', autoescape=True))
    if mine_only:
        mine: list[ColumnElement[bool]] = [
            Environment.user_id == principal.user_id,
            Environment.team_id.in_(sorted(principal.team_ids)) if principal.team_ids else false(),
        ]
        conditions.append(or_(*mine))
    if not include_teams:
        conditions.append(or_(Environment.team_id.is_(None), Environment.visibility == "PUBLIC"))
    column = {
        "name": Environment.name,
        "updated_at": func.coalesce(Environment.updated_at, Environment.created_at),
    }.get(sort_by, Environment.created_at)
    order = column.desc() if descending else column.asc()
    total = session.scalar(select(func.count()).select_from(Environment).where(*conditions)) or 0
    rows = session.scalars(
        select(Environment)
        .where(*conditions)
        .order_by(order, Environment.id)
        .offset(offset)
        .limit(limit)
    ).all()
    return list(rows), int(total)


def versions_of(session: Session, env_id: str) -> list[EnvironmentVersion]:
    """The READY versions of an environment, newest first."""
    return list(
        session.scalars(
            select(EnvironmentVersion)
            .where(
                EnvironmentVersion.environment_id == env_id, EnvironmentVersion.status == "READY"
            )
            .order_by(EnvironmentVersion.finalized_at.desc(), EnvironmentVersion.id)
        ).all()
    )


def version_by_hash(session: Session, env_id: str, content_hash: str) -> EnvironmentVersion | None:
    """The version (any status) of an environment with this content hash."""
    return session.scalar(
        select(EnvironmentVersion).where(
            EnvironmentVersion.environment_id == env_id,
            EnvironmentVersion.content_hash == content_hash,
        )
    )


def version_by_id(session: Session, version_id: str) -> EnvironmentVersion | None:
    """The version with this id, or None."""
    return session.get(EnvironmentVersion, version_id)


def ready_with_semver(
    session: Session, env_id: str, semantic_version: str
) -> EnvironmentVersion | None:
    """The READY version of an environment published as `semantic_version`."""
    return session.scalar(
        select(EnvironmentVersion).where(
            EnvironmentVersion.environment_id == env_id,
            EnvironmentVersion.status == "READY",
            EnvironmentVersion.semantic_version == semantic_version,
        )
    )


def artifact_in_use(session: Session, path: str) -> bool:
    """Whether any version still refers to this stored file."""
    found = session.scalar(
        select(EnvironmentVersion.id)
        .where(or_(EnvironmentVersion.wheel_path == path, EnvironmentVersion.source_path == path))
        .limit(1)
    )
    return found is not None
