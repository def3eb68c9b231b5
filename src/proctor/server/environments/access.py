"""Who sees and who changes an environment of the hub, and finding one by name or id.

Visibility follows the evaluations' rule: an environment is seen by its user, its team's
members and admins, and by everyone when PUBLIC; any other key gets the same 404 as for a
name that does not exist. The environments installed with the server are PUBLIC entries of
the hub's own owner (`Settings.hub_owner`; the public CLI's `primeintellect` reads as it),
and nobody pushes to them.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Environment
from proctor.server.environments import repository
from proctor.server.environments.installed import PUBLIC_CLIENT_OWNER
from proctor.server.errors import Forbidden, NotVisible
from proctor.server.settings import Settings


def readable(principal: Principal, env: Environment) -> bool:
    """Whether the principal may see the environment."""
    return (
        principal.is_admin
        or env.visibility == "PUBLIC"
        or (env.user_id is not None and env.user_id == principal.user_id)
        or (env.team_id is not None and env.team_id in principal.team_ids)
    )


def writable(principal: Principal, env: Environment) -> bool:
    """Whether the principal may push to or delete the environment."""
    if env.kind == "installed":
        return False
    return (
        principal.is_admin
        or (env.team_id is None and env.user_id == principal.user_id)
        or (env.team_id is not None and env.team_id in principal.team_ids)
    )


def hidden(owner: str, name: str) -> NotVisible:
    """The 404 of a name that does not exist or is not visible to this key."""
    return NotVisible(
        f"No environment {owner}/{name} is visible to this key; check the name, or push it "
        "with `proctor envs push`."
    )


def platform_owned(owner: str) -> Forbidden:
    """The 403 of creating an environment under the hub's own owner."""
    return Forbidden(
        f"{owner!r} holds the environments installed with the server; push under your own "
        "name or team.",
        code="owner_forbidden",
    )


def hub_owner_of(owner: str, settings: Settings) -> str:
    """The owner as stored: the public CLI's official owner means the hub's own."""
    return settings.hub_owner if owner == PUBLIC_CLIENT_OWNER else owner


def hub_ref_of(ref: str | None, settings: Settings) -> str | None:
    """An `owner/name` filter as stored: `primeintellect/x` names the hub's own `x`."""
    if not ref or "/" not in ref:
        return ref
    owner, _, name = ref.partition("/")
    return f"{hub_owner_of(owner, settings)}/{name}"


def find(
    session: Session, principal: Principal, owner: str, name: str, settings: Settings
) -> Environment:
    """The environment `owner/name` if the principal may see it.

    Raises:
        NotVisible: It does not exist or is hidden from this key.
    """
    principal.require_unscoped()
    env = repository.by_owner_and_name(session, hub_owner_of(owner, settings), name)
    if env is None or not readable(principal, env):
        raise hidden(owner, name)
    return env


def by_bare_name(
    session: Session, principal: Principal, name: str, team_id: str | None, settings: Settings
) -> Environment | None:
    """A bare name in the public CLI's order: the caller's own, its team's, the platform's."""
    owners = [principal.user_name, *([team_id] if team_id else []), settings.hub_owner]
    for owner in owners:
        env = repository.by_owner_and_name(session, owner, name)
        if env is not None and readable(principal, env):
            return env
    return None


def lookup(session: Session, principal: Principal, env_id: str) -> Environment:
    """The environment with this id, if visible."""
    principal.require_unscoped()
    env = repository.by_id(session, env_id)
    if env is None or not readable(principal, env):
        raise NotVisible(f"No environment with the id {env_id!r} is visible to this key.")
    return env


def require_writable(principal: Principal, env: Environment) -> Environment:
    """`env`, if the principal may change it.

    Raises:
        Forbidden: It is installed with the server, or belongs to someone else.
    """
    if writable(principal, env):
        return env
    if env.kind == "installed":
        raise Forbidden(
            f"{env.owner}/{env.name} is installed with the server and cannot be changed; push "
            "your own package under your name (`--owner`) or another name (`--name`).",
            code="owner_forbidden",
        )
    raise Forbidden(
        f"{env.owner}/{env.name} belongs to someone else; push under your own name (`--owner`) "
        "or another name (`--name`).",
        code="owner_forbidden",
    )


def pushable(session: Session, principal: Principal, env_id: str) -> Environment:
    """The environment with this id, if visible and the principal may push to it."""
    return require_writable(principal, lookup(session, principal, env_id))
