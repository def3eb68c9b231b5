"""Queries on the environments table."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from proctor.server.db.models import Environment


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
