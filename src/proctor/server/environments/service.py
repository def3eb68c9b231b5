"""Rules of the environments hub: names, owners, visibility, versions and pushes.

Visibility follows the evaluations' rule: an environment is seen by its user, its team's
members and admins, and by everyone when PUBLIC; any other key gets the same 404 as for a
name that does not exist. The environments installed with the server are PUBLIC entries of
the hub's own owner (`Settings.hub_owner`; the public CLI's `primeintellect` reads as it).

A push is the public CLI's sequence: resolve (get-or-create the entry), announce the wheel,
PUT it to the upload URL, finalize it, announce the version (and its source archive), PUT
that, finalize the version. Everything before the last step is a PENDING row nobody sees;
the version finalize makes it READY and the environment's latest.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.server.auth import repository as auth_repository
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import artifacts, repository
from proctor.server.environments.installed import PUBLIC_CLIENT_OWNER
from proctor.server.environments.schemas import (
    EnvironmentOut,
    FinalizeOut,
    ListedEnvironment,
    OwnerOut,
    ResolveRequest,
    StatusOut,
    UploadSlot,
    VersionOut,
    VersionRequest,
    VersionRow,
    WheelRequest,
)
from proctor.server.errors import Conflict, Forbidden, InvalidInput, NotVisible
from proctor.server.settings import Settings
from proctor.server.teams import check_team

VISIBILITIES = ("PUBLIC", "PRIVATE")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
UPLOAD_PREFIX = "/environmentshub/uploads"
"""Upload URLs live under this path of the API; the secret in them is the only credential."""


# -- who sees what ---------------------------------------------------------------------------


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


def _hidden(owner: str, name: str) -> NotVisible:
    return NotVisible(
        f"No environment {owner}/{name} is visible to this key; check the name, or push it "
        "with `proctor envs push`."
    )


def _platform_owned(owner: str) -> Forbidden:
    return Forbidden(
        f"{owner!r} holds the environments installed with the server; push under your own "
        "name or team.",
        code="owner_forbidden",
    )


def hub_owner_of(owner: str, settings: Settings) -> str:
    """The owner as stored: the public CLI's official owner means the hub's own."""
    return settings.hub_owner if owner == PUBLIC_CLIENT_OWNER else owner


def _owner_out(env: Environment) -> OwnerOut:
    kind = "platform" if env.kind == "installed" else "team" if env.team_id else "user"
    return OwnerOut(name=env.owner, type=kind)


def _version_out(version: EnvironmentVersion | None) -> VersionOut | None:
    if version is None:
        return None
    return VersionOut(
        id=version.id,
        semantic_version=version.semantic_version,
        content_hash=version.content_hash,
        created_at=version.finalized_at or version.created_at,
    )


def _latest(session: Session, env: Environment) -> EnvironmentVersion | None:
    if env.latest_version_id is None:
        return None
    version = repository.version_by_id(session, env.latest_version_id)
    return version if version is not None and version.status == "READY" else None


def to_out(
    session: Session,
    env: Environment,
    version: EnvironmentVersion | None = None,
    *,
    created: bool = False,
) -> EnvironmentOut:
    """The API shape of an environment, with `version` (default: its latest) spelled out."""
    latest = _latest(session, env)
    shown = version or latest
    details = dict(shown.details or {}) if shown is not None else {}
    return EnvironmentOut(
        id=env.id,
        name=env.name,
        owner=_owner_out(env),
        team_id=env.team_id,
        visibility=env.visibility,
        kind=env.kind,
        description=env.description,
        tags=[str(t) for t in env.tags or []],
        created=created,
        latest_version=_version_out(latest),
        semantic_version=shown.semantic_version if shown else None,
        content_hash=shown.content_hash if shown else None,
        version_id=shown.id if shown else None,
        entry_points=[str(n) for n in details.get("entry_points") or []],
        metadata={"description": env.description or ""},
    )


def listed(env: Environment) -> ListedEnvironment:
    """The list-row shape of an environment."""
    return ListedEnvironment(
        id=env.id,
        name=env.name,
        owner=_owner_out(env),
        description=env.description,
        latest_version=env.latest_semantic_version or (env.latest_content_hash or "")[:8] or None,
        visibility=env.visibility,
        kind=env.kind,
        tags=[str(t) for t in env.tags or []],
        created_at=env.created_at,
        updated_at=env.updated_at or env.created_at,
    )


# -- finding environments ----------------------------------------------------------------------


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
        raise _hidden(owner, name)
    return env


def by_bare_name(
    session: Session, principal: Principal, name: str, team_id: str | None, settings: Settings
) -> Environment | None:
    """A bare name in the public CLI's order: the caller's own, its team's, the platform's."""
    owners = [principal.user_name]
    if team_id:
        owners.insert(0, team_id)
    owners.append(settings.hub_owner)
    for owner in owners:
        env = repository.by_owner_and_name(session, owner, name)
        if env is not None and readable(principal, env):
            return env
    return None


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


def resolve(
    session: Session, principal: Principal, body: ResolveRequest, settings: Settings
) -> tuple[Environment, bool]:
    """The environment a name means to the caller, created (as theirs) when it is new.

    A bare name follows the fallback order (own, team, platform); an explicit owner
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
        owner = hub_owner_of(explicit, settings)
        if owner == principal.user_name:
            team = None
        elif owner in principal.team_ids:
            team = owner
        else:
            env = repository.by_owner_and_name(session, owner, name)
            if env is not None and readable(principal, env):
                return env, False
            if env is not None:
                raise _hidden(owner, name)
            if owner == settings.hub_owner:
                raise _platform_owned(owner)
            if not (principal.is_admin and auth_repository.team_by_id(session, owner)):
                raise Forbidden(
                    f"This key may not create environments under {owner!r}; use your own "
                    "name or a team you belong to.",
                    code="owner_forbidden",
                )
            team = owner
        env = repository.by_owner_and_name(session, owner, name)
    else:
        owner = team or principal.user_name
        env = by_bare_name(session, principal, name, team, settings)
    if env is not None:
        if visibility and writable(principal, env) and env.visibility != visibility:
            env.visibility = visibility
            env.updated_at = utcnow()
        return env, False
    if owner == settings.hub_owner:
        raise _platform_owned(owner)
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


def lookup(session: Session, principal: Principal, env_id: str) -> Environment:
    """The environment with this id, if visible."""
    principal.require_unscoped()
    env = repository.by_id(session, env_id)
    if env is None or not readable(principal, env):
        raise NotVisible(f"No environment with the id {env_id!r} is visible to this key.")
    return env


def version_of(session: Session, env: Environment, ref: str | None) -> EnvironmentVersion | None:
    """The READY version `ref` names: `latest`/None, a semantic version or a content hash prefix.

    Raises:
        NotVisible: No such version (an unpublished environment has only `latest`, None).
    """
    if ref is None or ref == "latest":
        return _latest(session, env)
    for version in repository.versions_of(session, env.id):
        if version.semantic_version == ref:
            return version
    if len(ref) >= 8:
        for version in repository.versions_of(session, env.id):
            if version.content_hash.startswith(ref.lower()):
                return version
    raise NotVisible(
        f"{env.owner}/{env.name} has no version {ref!r}; "
        f"`prime env version list {env.owner}/{env.name}` shows them."
    )


def status(env: Environment, session: Session) -> StatusOut:
    """The `status` shape of an environment."""
    return StatusOut(
        id=env.id,
        name=env.name,
        owner=_owner_out(env),
        description=env.description,
        visibility=env.visibility,
        latest_version=_version_out(_latest(session, env)),
    )


def version_rows(session: Session, env: Environment) -> list[VersionRow]:
    """The READY versions, newest first."""
    return [
        VersionRow(
            id=v.id,
            version=v.semantic_version or v.content_hash[:8],
            semantic_version=v.semantic_version,
            content_hash=v.content_hash,
            sha256=v.content_hash,
            wheel_sha256=v.wheel_sha256,
            wheel_filename=v.wheel_filename,
            size=int(v.wheel_path is not None) + int(v.source_path is not None),
            created_at=v.finalized_at or v.created_at,
        )
        for v in repository.versions_of(session, env.id)
    ]


def _writable_env(session: Session, principal: Principal, env: Environment) -> Environment:
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


def _refresh_latest(session: Session, env: Environment) -> None:
    versions = repository.versions_of(session, env.id)
    latest = versions[0] if versions else None
    env.latest_version_id = latest.id if latest else None
    env.latest_semantic_version = latest.semantic_version if latest else None
    env.latest_content_hash = latest.content_hash if latest else None
    env.updated_at = utcnow()


def _drop_files(session: Session, version: EnvironmentVersion) -> None:
    session.flush()
    for path in (version.wheel_path, version.source_path):
        if path and not repository.artifact_in_use(session, path):
            artifacts.remove(path)


def delete_version(
    session: Session, principal: Principal, env: Environment, content_hash: str
) -> str:
    """Delete the version whose content hash starts with `content_hash` (8+ characters)."""
    _writable_env(session, principal, env)
    prefix = content_hash.strip().lower()
    matches = [
        v for v in repository.versions_of(session, env.id) if v.content_hash.startswith(prefix)
    ]
    if len(prefix) < 8 or not matches:
        raise NotVisible(
            f"{env.owner}/{env.name} has no version with content hash {content_hash!r}."
        )
    if len(matches) > 1:
        raise InvalidInput(f"{content_hash!r} matches several versions; give more of the hash.")
    version = matches[0]
    session.delete(version)
    _drop_files(session, version)
    _refresh_latest(session, env)
    return f"Deleted version {version.semantic_version or version.content_hash[:8]}."


def delete_environment(session: Session, principal: Principal, env: Environment) -> str:
    """Delete an environment with all its versions and stored packages."""
    _writable_env(session, principal, env)
    versions = list(
        session.query(EnvironmentVersion).filter(EnvironmentVersion.environment_id == env.id)
    )
    for version in versions:
        session.delete(version)
    session.flush()
    for version in versions:
        _drop_files(session, version)
    session.delete(env)
    return f"Deleted {env.owner}/{env.name}."


# -- pushing ------------------------------------------------------------------------------------


def _token() -> tuple[str, str]:
    secret = secrets.token_urlsafe(32)
    return secret, hashlib.sha256(secret.encode()).hexdigest()


def _upload_url(base_url: str, version: EnvironmentVersion, kind: str) -> str:
    secret, digest = _token()
    version.upload_token_hash = digest
    return f"{base_url}{UPLOAD_PREFIX}/{version.id}/{kind}/{secret}"


def _check_semver(
    session: Session, env: Environment, semantic_version: str | None, content_hash: str
) -> None:
    if not semantic_version:
        return
    other = repository.ready_with_semver(session, env.id, semantic_version)
    if other is not None and other.content_hash != content_hash:
        raise Conflict(
            f"Version {semantic_version} of {env.owner}/{env.name} is already published with "
            "other content; bump the version in pyproject.toml (prime: --auto-bump) and push "
            "again.",
            code="version_conflict",
        )


def _pushable(session: Session, principal: Principal, env_id: str) -> Environment:
    principal.require_unscoped()
    env = repository.by_id(session, env_id)
    if env is None or not readable(principal, env):
        raise NotVisible(f"No environment with the id {env_id!r} is visible to this key.")
    return _writable_env(session, principal, env)


def _staged(
    session: Session, env: Environment, principal: Principal, content_hash: str
) -> EnvironmentVersion:
    version = repository.version_by_hash(session, env.id, content_hash)
    if version is not None:
        return version
    version = EnvironmentVersion(
        environment_id=env.id,
        content_hash=content_hash,
        status="PENDING",
        details={},
        user_id=principal.user_id,
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            session.add(version)
            session.flush()
    except IntegrityError:
        found = repository.version_by_hash(session, env.id, content_hash)
        if found is None:
            raise
        return found
    return version


def prepare_wheel(
    session: Session,
    principal: Principal,
    env_id: str,
    body: WheelRequest,
    settings: Settings,
    base_url: str,
) -> UploadSlot:
    """Stage a wheel for a content hash; the upload URL is null when it is already published."""
    env = _pushable(session, principal, env_id)
    content_hash = artifacts.check_sha256(body.content_hash, "content_hash")
    sha256 = artifacts.check_sha256(body.sha256, "sha256")
    filename = artifacts.check_filename(body.filename, (".whl",), "The wheel")
    if body.size > settings.hub_max_artifact_bytes:
        raise artifacts.too_large(body.size, settings.hub_max_artifact_bytes)
    _check_semver(session, env, body.semantic_version, content_hash)
    version = _staged(session, env, principal, content_hash)
    if version.status == "READY":
        return UploadSlot(wheel_id=version.id, upload_url=None)
    if version.wheel_sha256 != sha256 and version.wheel_path:
        version.wheel_path = None  # a rebuilt wheel replaces the staged one
    version.wheel_filename, version.wheel_sha256, version.wheel_size = filename, sha256, body.size
    version.semantic_version = body.semantic_version
    version.details = {
        **(version.details or {}),
        **body.metadata.model_dump(mode="json"),
        "runtime_hint": body.runtime_hint,
    }
    if version.wheel_path and Path(version.wheel_path).is_file():
        return UploadSlot(wheel_id=version.id, upload_url=None)
    return UploadSlot(wheel_id=version.id, upload_url=_upload_url(base_url, version, "wheel"))


@dataclass(frozen=True)
class UploadTarget:
    """Where an authorised upload goes and what it must hash to."""

    version_id: str
    kind: str
    path: Path | None
    """None: the version is already published; the bytes are read and dropped."""
    sha256: str
    size: int | None


def upload_target(
    session: Session, version_id: str, kind: str, secret: str, settings: Settings
) -> UploadTarget:
    """Check an upload URL's secret; where its bytes go.

    Raises:
        Forbidden: The URL is unknown, used up or forged.
    """
    version = repository.version_by_id(session, version_id)
    expected = version.upload_token_hash if version is not None else None
    given = hashlib.sha256(secret.encode()).hexdigest()
    if version is None or expected is None or not hmac.compare_digest(expected, given):
        raise Forbidden(
            "This upload URL is not valid (used up or never issued); push again for a new one.",
            code="upload_forbidden",
        )
    if version.status == "READY":
        return UploadTarget(version_id, kind, None, version.content_hash, None)
    if kind == "wheel" and version.wheel_sha256 and version.wheel_filename:
        path = artifacts.stored_path(
            settings.hub_dir(), "wheel", version.wheel_sha256, version.wheel_filename
        )
        return UploadTarget(version_id, kind, path, version.wheel_sha256, version.wheel_size)
    if kind == "source" and version.source_sha256 and version.source_filename:
        path = artifacts.stored_path(
            settings.hub_dir(), "source", version.source_sha256, version.source_filename
        )
        return UploadTarget(version_id, kind, path, version.source_sha256, None)
    raise InvalidInput(f"Nothing of kind {kind!r} was announced for this push; push again.")


def record_upload(session: Session, target: UploadTarget) -> None:
    """Note that an upload arrived whole."""
    version = repository.version_by_id(session, target.version_id)
    if version is None or target.path is None:
        return
    if target.kind == "wheel":
        version.wheel_path = str(target.path)
    else:
        version.source_path = str(target.path)


def finalize_wheel(session: Session, principal: Principal, env_id: str, wheel_id: str) -> str:
    """Check the uploaded wheel and read which environments it provides."""
    env = _pushable(session, principal, env_id)
    version = repository.version_by_id(session, wheel_id)
    if version is None or version.environment_id != env.id:
        raise NotVisible(f"No wheel {wheel_id!r} was announced for {env.owner}/{env.name}.")
    if version.status == "READY":
        return "already published"
    if not version.wheel_path or not Path(version.wheel_path).is_file():
        raise Conflict(
            "The wheel was not uploaded yet; PUT it to the upload URL, then finalize.",
            code="upload_missing",
        )
    try:
        facts = artifacts.read_wheel(Path(version.wheel_path))
    except InvalidInput:
        path, version.wheel_path = version.wheel_path, None
        session.flush()
        if not repository.artifact_in_use(session, path):
            artifacts.remove(path)
        raise
    version.details = {
        **(version.details or {}),
        "distribution": facts.name,
        "distribution_version": facts.version,
        "requires_dist": facts.requires_dist,
        "entry_points": facts.entry_points,
        "summary": facts.summary,
    }
    return "wheel uploaded"


def prepare_version(
    session: Session, principal: Principal, env_id: str, body: VersionRequest, base_url: str
) -> UploadSlot:
    """Stage the version (and its source archive) for the content hash of the wheel."""
    env = _pushable(session, principal, env_id)
    content_hash = artifacts.check_sha256(body.content_hash, "content_hash")
    _check_semver(session, env, body.semantic_version, content_hash)
    version = _staged(session, env, principal, content_hash)
    if version.status == "READY":
        # Same content again: accept (and drop) the upload, so the push is a no-op.
        url = _upload_url(base_url, version, "source") if body.sha256 else None
        return UploadSlot(version_id=version.id, upload_url=url)
    if body.semantic_version is not None:
        version.semantic_version = body.semantic_version
    version.details = {**(version.details or {}), **body.metadata.model_dump(mode="json")}
    if not body.sha256 or not body.filename:
        return UploadSlot(version_id=version.id, upload_url=None)
    version.source_sha256 = artifacts.check_sha256(body.sha256, "sha256")
    version.source_filename = artifacts.check_filename(
        body.filename, (".tar.gz", ".tgz", ".zip"), "The source archive"
    )
    version.source_path = None
    return UploadSlot(version_id=version.id, upload_url=_upload_url(base_url, version, "source"))


def finalize_version(
    session: Session, principal: Principal, env_id: str, version_id: str
) -> FinalizeOut:
    """Publish a staged version: it becomes READY and the environment's latest."""
    env = _pushable(session, principal, env_id)
    version = repository.version_by_id(session, version_id)
    if version is None or version.environment_id != env.id:
        raise NotVisible(f"No version {version_id!r} was announced for {env.owner}/{env.name}.")
    label = f"{env.owner}/{env.name}@{version.semantic_version or version.content_hash[:8]}"
    if version.status == "READY":
        version.upload_token_hash = None
        return FinalizeOut(
            success=True,
            message=f"{label} is already published with this content; nothing changed.",
            version_id=version.id,
            semantic_version=version.semantic_version,
            content_hash=version.content_hash,
        )
    if not version.wheel_path or "entry_points" not in (version.details or {}):
        raise Conflict(
            "The version has no finalized wheel; upload and finalize the wheel first.",
            code="upload_missing",
        )
    if version.source_sha256 and not version.source_path:
        raise Conflict(
            "The source archive was not uploaded; PUT it to the upload URL, then finalize.",
            code="upload_missing",
        )
    _check_semver(session, env, version.semantic_version, version.content_hash)
    now = utcnow()
    version.status, version.finalized_at, version.upload_token_hash = "READY", now, None
    env.kind = "pushed"
    details = version.details or {}
    env.description = str(details.get("description") or details.get("summary") or "") or None
    env.tags = [str(t) for t in details.get("tags") or []]
    env.latest_version_id = version.id
    env.latest_semantic_version = version.semantic_version
    env.latest_content_hash = version.content_hash
    env.updated_at = now
    return FinalizeOut(
        success=True,
        message=f"Published {label}.",
        version_id=version.id,
        semantic_version=version.semantic_version,
        content_hash=version.content_hash,
    )


# -- running ------------------------------------------------------------------------------------


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
            "ref": f"{self.env.owner}/{self.env.name}@{v.semantic_version or v.content_hash[:8]}",
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
    label = f"{env.owner}/{env.name}@{version.semantic_version or version.content_hash[:8]}"
    if not names:
        raise InvalidInput(
            f"{label} provides no `proctor.environments` entry point, so proctor cannot run it; "
            'add one under [project.entry-points."proctor.environments"] and push again.'
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
    if env is None or not readable(principal, env):
        owner, name, version_ref = _split(ref)
        if not name:
            raise InvalidInput(f"{ref!r} names no environment; send e.g. 'alphabet-sort'.")
        found = (
            find(session, principal, owner, name, settings)
            if owner
            else by_bare_name(session, principal, name, team_id, settings)
        )
        if found is None:
            raise NotVisible(
                f"No environment {name!r} is on the hub for this key; push it with "
                "`proctor envs push` or pick one from `GET /environmentshub/`."
            )
        env = found
    version = version_of(session, env, version_ref)
    if version is None or (version.details or {}).get("installed"):
        return Runnable(env, version, env.name)
    return Runnable(env, version, _entry_point(env, version))
