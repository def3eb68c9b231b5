"""Rules for API keys, users and teams; used by the API and by `proctor keys`/`proctor teams`.

Keys are `pk_` plus 32 random bytes (URL-safe base64). Only their SHA-256 is stored: keys are
high-entropy, so a slow hash adds nothing. A key's secret is returned once, at creation, and
never logged.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from proctor.errors import ConfigError
from proctor.server.auth import repository
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import ApiKey, Evaluation, Team, TeamMember, User
from proctor.server.errors import Unauthenticated

logger = logging.getLogger(__name__)

KEY_PREFIX = "pk_"
ADMIN_USER = "admin"


@dataclass(frozen=True)
class CreatedKey:
    """A freshly created key: its row and the secret, which is shown this once."""

    key: ApiKey
    secret: str


def generate_secret() -> str:
    """A new random key secret."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(secret: str) -> str:
    """The stored form of a key secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def display_prefix(secret: str) -> str:
    """The leading characters shown in listings to tell keys apart."""
    return secret[:12]


def ensure_user(session: Session, name: str, *, is_admin: bool = False) -> User:
    """The user called `name`, created if missing."""
    user = repository.user_by_name(session, name)
    if user is None:
        user = User(name=name, is_admin=is_admin)
        session.add(user)
        session.flush()
    return user


def _add_key(
    session: Session,
    secret: str,
    *,
    name: str,
    user: User,
    is_admin: bool = False,
    scope_evaluation_id: str | None = None,
) -> ApiKey:
    key = ApiKey(
        key_hash=hash_key(secret),
        prefix=display_prefix(secret),
        name=name,
        user_id=user.id,
        is_admin=is_admin,
        scope_evaluation_id=scope_evaluation_id,
    )
    session.add(key)
    session.flush()
    return key


def create_key(
    session: Session,
    *,
    name: str,
    user_name: str | None = None,
    team_id: str | None = None,
    is_admin: bool = False,
    evaluation_id: str | None = None,
) -> CreatedKey:
    """Create a key for a user (created if missing; default: a user named like the key).

    Args:
        session: A write session.
        name: The key's display name.
        user_name: The owning user; defaults to the evaluation's owner for a scoped key,
            else to `name`.
        team_id: A team the user is added to, so the key sees that team's evaluations.
        is_admin: Whether the key sees and may change everything.
        evaluation_id: Limit the key to this one evaluation.

    Raises:
        ConfigError: The team or evaluation does not exist.
    """
    if not name.strip():
        raise ConfigError("A key needs a name; pass --name NAME.")
    evaluation = None if evaluation_id is None else session.get(Evaluation, evaluation_id)
    if evaluation_id is not None and evaluation is None:
        raise ConfigError(f"There is no evaluation with id {evaluation_id!r}; check the id.")
    owner = None
    if evaluation is not None and user_name is None:
        # A key scoped to an evaluation acts as its owner, so that it can reach it.
        owner = repository.user_by_id(session, evaluation.user_id)
    user = owner or ensure_user(session, user_name or name, is_admin=is_admin)
    if team_id is not None:
        add_member(session, team_id, user.name)
    secret = generate_secret()
    key = _add_key(
        session, secret, name=name, user=user, is_admin=is_admin, scope_evaluation_id=evaluation_id
    )
    logger.info("created key %s (%s) for user %s", key.id, key.prefix, user.name)
    return CreatedKey(key, secret)


def mint_scoped_key(
    session: Session, evaluation_id: str, user_id: str, *, name: str | None = None
) -> str:
    """Create a key limited to one evaluation, owned by `user_id`; returns the secret.

    The hosted launcher hands it to a sandbox: it may read that evaluation's record and write
    to it (samples, PUT, finalize) and nothing else.
    """
    user = repository.user_by_id(session, user_id)
    if user is None:
        raise ConfigError(f"There is no user with id {user_id!r}; check the id.")
    secret = generate_secret()
    _add_key(
        session,
        secret,
        name=name or f"scoped:{evaluation_id}",
        user=user,
        scope_evaluation_id=evaluation_id,
    )
    return secret


def ensure_bootstrap_key(session: Session, secret: str) -> bool:
    """Create an admin key with exactly `secret` if no key exists yet; True if created."""
    if repository.count_keys(session) > 0:
        return False
    user = ensure_user(session, ADMIN_USER, is_admin=True)
    _add_key(session, secret, name="bootstrap", user=user, is_admin=True)
    logger.info("created the bootstrap admin key for user %s", user.name)
    return True


def has_keys(session: Session) -> bool:
    """Whether any API key exists."""
    return repository.count_keys(session) > 0


SANDBOX_KEY_PREFIX = "sandbox:"
"""How the names of the keys the launcher mints for one hosted evaluation begin."""


def list_keys(session: Session, *, everything: bool = True) -> list[tuple[ApiKey, User]]:
    """Every key with its user; without `everything`, not the revoked keys of past sandboxes
    (one per hosted run, which would bury the keys people made)."""
    rows = repository.list_keys(session)
    if everything:
        return rows
    return [(k, u) for k, u in rows if not (k.revoked_at and is_sandbox_key(k))]


def is_sandbox_key(key: ApiKey) -> bool:
    """True for a key the launcher minted for a sandbox."""
    return key.name.startswith(SANDBOX_KEY_PREFIX)


def revoke_key(session: Session, ref: str) -> ApiKey:
    """Revoke the key whose id or displayed prefix is `ref`."""
    matches = repository.keys_matching(session, ref)
    if not matches:
        raise ConfigError(f"No key has the id or prefix {ref!r}; see `proctor keys list`.")
    if len(matches) > 1:
        raise ConfigError(f"Several keys have the prefix {ref!r}; revoke by id instead.")
    key = matches[0]
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    return key


def authenticate(session: Session, secret: str | None) -> Principal:
    """The principal of a key secret.

    Raises:
        Unauthenticated: No key given, or it is unknown or revoked.
    """
    if not secret:
        raise Unauthenticated(
            "This call needs an API key: send `Authorization: Bearer <key>`; "
            "create one with `proctor keys create`."
        )
    found = repository.key_identity(session, hash_key(secret))
    if found is None or found.revoked:
        raise Unauthenticated(
            "The API key is invalid or revoked; create a new one with `proctor keys create`."
        )
    return Principal(
        key_id=found.key_id,
        user_id=found.user_id,
        user_name=found.user_name,
        is_admin=found.is_admin,
        team_ids=frozenset(found.team_ids),
        scope_evaluation_id=found.scope_evaluation_id,
    )


def record_use(session: Session, key_id: str, when: datetime) -> None:
    """Store the key's last use time."""
    repository.touch_key(session, key_id, when)


def create_team(session: Session, name: str, *, team_id: str | None = None) -> Team:
    """Create a team; its id (what clients send as `team_id`) defaults to its name."""
    if not name.strip():
        raise ConfigError("A team needs a name; pass NAME.")
    team_id = team_id or name
    if repository.team_by_id(session, team_id) is not None:
        raise ConfigError(f"A team with id {team_id!r} exists already; pick another name.")
    team = Team(id=team_id, name=name)
    session.add(team)
    session.flush()
    return team


def _team(session: Session, team_id: str) -> Team:
    team = repository.team_by_id(session, team_id)
    if team is None:
        raise ConfigError(f"There is no team {team_id!r}; create it with `proctor teams create`.")
    return team


def add_member(
    session: Session, team_id: str, user_name: str, *, role: str | None = None
) -> TeamMember:
    """Add a user (created if missing) to a team as `role` (default `member`); adding twice
    changes nothing but the role, when one is given."""
    team = _team(session, team_id)
    user = ensure_user(session, user_name)
    existing = repository.membership(session, team.id, user.id)
    if existing is not None:
        if role is not None:
            existing.role = role
        return existing
    member = TeamMember(team_id=team.id, user_id=user.id, role=role or "member")
    session.add(member)
    session.flush()
    return member


def remove_member(session: Session, team_id: str, user_name: str) -> None:
    """Remove a user from a team."""
    team = _team(session, team_id)
    user = repository.user_by_name(session, user_name)
    member = None if user is None else repository.membership(session, team.id, user.id)
    if member is None:
        raise ConfigError(f"{user_name!r} is not a member of team {team_id!r}; nothing to remove.")
    session.delete(member)


def list_teams(session: Session) -> list[Team]:
    """Every team."""
    return repository.list_teams(session)


def list_members(session: Session, team_id: str) -> list[tuple[TeamMember, User]]:
    """A team's members with their users."""
    return repository.members_of(session, _team(session, team_id).id)


def teams_of(session: Session, principal: Principal) -> list[tuple[Team, str]]:
    """The teams the principal's user belongs to, with the user's role in each."""
    return [
        (team, member.role)
        for team, member in repository.memberships_of(session, principal.user_id)
    ]
