"""Rules of the environments hub: get-or-create by name, lookup by id, `@latest`."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.base import new_id
from proctor.server.db.models import Environment
from proctor.server.environments import repository
from proctor.server.environments.schemas import EnvironmentOut, VersionOut
from proctor.server.errors import Forbidden, InvalidInput, NotVisible
from proctor.server.teams import check_team


def to_out(env: Environment) -> EnvironmentOut:
    """The API shape of an environment."""
    return EnvironmentOut(
        id=env.id,
        name=env.name,
        owner=env.owner,
        team_id=env.team_id,
        latest_version=VersionOut(
            id=env.latest_version_id,
            semantic_version=env.latest_semantic_version,
            content_hash=env.latest_content_hash,
        ),
    )


def resolve(session: Session, principal: Principal, name: str, team_id: str | None) -> Environment:
    """The environment called `name` under the caller's owner, created if missing."""
    principal.require_unscoped()
    team = check_team(session, principal, team_id)
    owner, _, bare = name.rpartition("/")
    bare = bare.strip(" \t\n\r\f\v")  # the blanks `NAME_PATTERN` names
    if not bare:
        raise InvalidInput("The environment name is empty; send a name such as 'alphabet-sort'.")
    if not owner:
        owner = team or principal.user_name
    env = repository.by_owner_and_name(session, owner, bare)
    if env is not None:
        return env
    if owner not in {principal.user_name, *principal.team_ids} and not principal.is_admin:
        raise Forbidden(
            f"This key may not create environments under {owner!r}; use your own name or team."
        )
    env = Environment(
        owner=owner, name=bare, team_id=team, user_id=principal.user_id, latest_version_id=new_id()
    )
    try:
        with session.begin_nested():
            repository.add(session, env)
    except IntegrityError:
        # A concurrent resolve created it first: return that one.
        found = repository.by_owner_and_name(session, owner, bare)
        if found is None:
            raise
        return found
    return env


def lookup(session: Session, principal: Principal, env_id: str) -> Environment:
    """The environment with this id."""
    principal.require_unscoped()
    env = repository.by_id(session, env_id)
    if env is None:
        raise NotVisible(f"No environment has the id {env_id!r}; resolve it by name first.")
    return env


def latest(session: Session, principal: Principal, owner: str, name: str) -> Environment:
    """The environment `owner/name` with its latest version."""
    principal.require_unscoped()
    env = repository.by_owner_and_name(session, owner, name)
    if env is None:
        raise NotVisible(f"No environment is called {owner}/{name}; resolve it by name first.")
    return env
