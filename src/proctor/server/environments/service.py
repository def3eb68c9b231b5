"""What a name on the hub means to a caller: the entry a push goes to, the package a run runs.

`resolve` is a push's first step (get-or-create the entry `owner/name` or a bare name; the
rest of the push is `publishing`), and how a run that pushes results (prime-runs, prime-evals,
proctor's runs SDK) names the environment it ran; `runnable` is what a hosted evaluation of a
hub reference installs and runs. A bare name is looked up in the public CLI's order: the
caller's own, its team's, the platform's (`access.by_bare_name`). The platform's entries
installed with the server are proctor's own environments: `resolve` hands one only to a
caller that ran proctor's (`framework: "proctor"`), so results of another environment of the
same name (verifiers' `reverse-text` run by `vf-eval`) are filed under the caller's own
entry, never under the built-in. `ran_ref` is the `owner/name@version` an evaluation ran.
Who sees what is `access`; which version a reference names is `versions`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.server.auth import repository as auth_repository
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import access, repository, versions
from proctor.server.environments.schemas import ResolveRequest
from proctor.server.errors import Forbidden, InvalidInput, NotVisible
from proctor.server.settings import Settings
from proctor.server.teams import check_team

VISIBILITIES = ("PUBLIC", "PRIVATE")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _split(ref: str) -> tuple[str, str, str | None]:
    """`owner/name@version` into its parts (owner and version may be empty/None)."""
    path, _, version = ref.partition("@")
    owner, _, name = path.rpartition("/")
    return owner.strip(), name.strip(), (version.strip() or None) if "@" in ref else None


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"The environment name {name!r} is not valid; use letters, digits, '.', '_' and '-' "
            "(e.g. 'alphabet-sort')."
        )
    return name


def _visibility(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    text = value.strip().upper()
    if text not in VISIBILITIES:
        raise InvalidInput(f"visibility must be PUBLIC or PRIVATE, not {value!r}.")
    return text


def _under_other_owner(
    session: Session, principal: Principal, owner: str, name: str, settings: Settings
) -> Environment | None:
    """`owner/name` where `owner` is neither the caller nor one of its teams: the entry if it
    exists and is visible, None if an admin may create it there.

    Raises:
        NotVisible: It exists but is hidden from this key.
        Forbidden: The caller may not create environments under `owner`.
    """
    env = repository.by_owner_and_name(session, owner, name)
    if env is not None and access.readable(principal, env):
        return env
    if env is not None:
        raise access.hidden(owner, name)
    if owner == settings.hub_owner:
        raise access.platform_owned(owner)
    if not (principal.is_admin and auth_repository.team_by_id(session, owner)):
        raise Forbidden(
            f"This key may not create environments under {owner!r}; use your own "
            "name or a team you belong to.",
            code="owner_forbidden",
        )
    return None


def _create(
    session: Session,
    principal: Principal,
    owner: str,
    name: str,
    team: str | None,
    visibility: str | None,
) -> tuple[Environment, bool]:
    env = Environment(
        owner=owner,
        name=name,
        team_id=team,
        user_id=principal.user_id,
        visibility=visibility or "PRIVATE",
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            repository.add(session, env)
    except IntegrityError:
        # A concurrent resolve created it first: return that one.
        found = repository.by_owner_and_name(session, owner, name)
        if found is None:
            raise
        return found, False
    return env, True


def resolve(
    session: Session, principal: Principal, body: ResolveRequest, settings: Settings
) -> tuple[Environment, bool]:
    """The environment a name means to the caller, created (as theirs) when it is new.

    A bare name follows the fallback order (own, team, platform), where the platform's
    installed environments count only for `framework: "proctor"`; an explicit owner
    (`owner/name`, `owner_slug`, `team_slug`) is looked up or created there only.

    Returns:
        The environment, and whether this call created it.
    """
    principal.require_unscoped()
    owner, name, _ = _split(body.name)
    name = name.strip(" \t\n\r\f\v")  # the blanks `NAME_PATTERN` allows around it
    if not name:
        raise InvalidInput("The environment name is empty; send a name such as 'alphabet-sort'.")
    _check_name(name)
    visibility = _visibility(body.visibility)
    team = check_team(session, principal, body.team_id or body.team_slug)
    explicit = owner or (body.owner_slug or "").strip() or (body.team_slug or "").strip()
    if explicit:
        owner = access.hub_owner_of(explicit, settings)
        if owner == principal.user_name:
            team = None
        elif owner in principal.team_ids:
            team = owner
        else:
            existing = _under_other_owner(session, principal, owner, name, settings)
            if existing is not None:
                return existing, False
            team = owner
        env = repository.by_owner_and_name(session, owner, name)
    else:
        owner = team or principal.user_name
        env = access.by_bare_name(session, principal, name, team, settings)
        if env is not None and env.kind == "installed" and body.framework != "proctor":
            # Not what this caller ran: its results go to an entry of its own.
            env = repository.by_owner_and_name(session, owner, name)
    if env is not None:
        if visibility and access.writable(principal, env) and env.visibility != visibility:
            env.visibility = visibility
            env.updated_at = utcnow()
        return env, False
    if owner == settings.hub_owner:
        raise access.platform_owned(owner)
    return _create(session, principal, owner, name, team, visibility)


def ran_ref(session: Session, ref: dict[str, Any]) -> str | None:
    """`owner/name@version` of what an evaluation's environment reference ran (None for an
    id the hub does not know): the version `version_id` names, else the one the client
    says it ran (`version`), else for an installed environment the server's install;
    `owner/name` alone when none is known."""
    env = repository.by_id(session, str(ref.get("id")))
    if env is None:
        return None
    label: str | None = None
    version_id = ref.get("version_id")
    version = repository.version_by_id(session, str(version_id)) if version_id else None
    if version is not None and version.environment_id == env.id:
        label = versions.label(version)
    elif isinstance(ref.get("version"), str) and ref["version"].strip():
        label = ref["version"].strip()[:64]
    elif env.kind == "installed":
        installed = versions.latest(session, env)
        label = versions.label(installed) if installed is not None else None
    return f"{env.owner}/{env.name}@{label}" if label else f"{env.owner}/{env.name}"


@dataclass(frozen=True)
class Runnable:
    """What a hosted evaluation of a hub reference runs."""

    env: Environment
    version: EnvironmentVersion | None
    entry_point: str
    """The `proctor eval` environment name inside the package (or the installed name)."""

    @property
    def package(self) -> dict[str, str] | None:
        """The wheel to install in the sandbox; None for the server's own environments."""
        v = self.version
        if v is None or not v.wheel_path or not v.wheel_sha256:
            return None
        return {
            "wheel": v.wheel_path,
            "sha256": v.wheel_sha256,
            "content_hash": v.content_hash,
            "version_id": v.id,
            "ref": versions.full_name(self.env, v),
        }


def _entry_point(env: Environment, version: EnvironmentVersion) -> str:
    names = [str(n) for n in (version.details or {}).get("entry_points") or []]

    def norm(text: str) -> str:
        return text.replace("_", "-").lower()

    for candidate in names:
        if norm(candidate) == norm(env.name):
            return candidate
    if len(names) == 1:
        return names[0]
    label = versions.full_name(env, version)
    if not names:
        raise InvalidInput(
            f"{label} provides no `proctor.environments` entry point, so proctor cannot run it; "
            'add one to the pyproject.toml table project.entry-points."proctor.environments" '
            "and push again."
        )
    raise InvalidInput(
        f"{label} provides several environments ({', '.join(names)}) and none is called "
        f"{env.name!r}; rename one or push it under one of those names."
    )


def runnable(
    session: Session, principal: Principal, ref: str, team_id: str | None, settings: Settings
) -> Runnable:
    """What a hosted run of `ref` (hub id, `owner/name[@version]` or a bare name) runs.

    Raises:
        NotVisible: No such environment or version is visible to this key.
        InvalidInput: The package provides no runnable environment.
    """
    env = repository.by_id(session, ref)
    version_ref: str | None = None
    if env is None or not access.readable(principal, env):
        owner, name, version_ref = _split(ref)
        if not name:
            raise InvalidInput(f"{ref!r} names no environment; send e.g. 'alphabet-sort'.")
        found = (
            access.find(session, principal, owner, name, settings)
            if owner
            else access.by_bare_name(session, principal, name, team_id, settings)
        )
        if found is None:
            raise NotVisible(
                f"No environment {name!r} is on the hub for this key; push it with "
                "`proctor envs push` or pick one from `GET /environmentshub/`."
            )
        env = found
    version = versions.version_of(session, env, version_ref)
    details = (version.details or {}) if version is not None else {}
    if version is None or details.get("installed"):
        return Runnable(env, version, env.name)
    if details.get("driver") == "verifiers":
        # Resolved in the sandbox as vf-eval resolves a hub id (`owner/name@version`).
        return Runnable(env, version, versions.full_name(env, version))
    return Runnable(env, version, _entry_point(env, version))
