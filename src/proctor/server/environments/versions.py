"""An environment's published versions: which one a reference names, the latest, deleting.

A version is READY once its push is finalized (`publishing`); until then it is a PENDING
row nobody sees. The environment row keeps its latest version's id, semantic version and
content hash, so lists need no join.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import access, artifacts, repository
from proctor.server.errors import InvalidInput, NotVisible
from proctor.server.settings import Settings


def label(version: EnvironmentVersion) -> str:
    """How a version is named to people: its semantic version, else its hash's start."""
    return version.semantic_version or version.content_hash[:8]


def full_name(env: Environment, version: EnvironmentVersion) -> str:
    """`owner/name@version`, as people read it."""
    return f"{env.owner}/{env.name}@{label(version)}"


def latest(session: Session, env: Environment) -> EnvironmentVersion | None:
    """The environment's latest READY version (None before its first push)."""
    if env.latest_version_id is None:
        return None
    version = repository.version_by_id(session, env.latest_version_id)
    return version if version is not None and version.status == "READY" else None


def set_latest(
    env: Environment, version: EnvironmentVersion | None, at: datetime | None = None
) -> None:
    """Make `version` (None: no version) the one the environment's row names as latest, as
    of `at` (default: now)."""
    env.latest_version_id = version.id if version else None
    env.latest_semantic_version = version.semantic_version if version else None
    env.latest_content_hash = version.content_hash if version else None
    env.updated_at = at or utcnow()


def version_of(session: Session, env: Environment, ref: str | None) -> EnvironmentVersion | None:
    """The READY version `ref` names: `latest`/None, a semantic version or a content hash prefix.

    Raises:
        NotVisible: No such version (an unpublished environment has only `latest`, None).
    """
    if ref is None or ref == "latest":
        return latest(session, env)
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


def drop_file(session: Session, path: str | None, settings: Settings) -> None:
    """Remove a stored package unless another version still uses it (same content)."""
    session.flush()
    if path and not repository.artifact_in_use(session, path):
        located = artifacts.locate(settings.resolved_data_dir(), path)
        artifacts.remove(str(located) if located else None)


def _drop_files(session: Session, version: EnvironmentVersion, settings: Settings) -> None:
    for path in (version.wheel_path, version.source_path):
        drop_file(session, path, settings)


def delete_version(
    session: Session, principal: Principal, env: Environment, content_hash: str, settings: Settings
) -> str:
    """Delete the version whose content hash starts with `content_hash` (8+ characters)."""
    access.require_writable(principal, env)
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
    _drop_files(session, version, settings)
    versions = repository.versions_of(session, env.id)
    set_latest(env, versions[0] if versions else None)
    return f"Deleted version {label(version)}."


def delete_environment(
    session: Session, principal: Principal, env: Environment, settings: Settings
) -> str:
    """Delete an environment with all its versions and stored packages."""
    access.require_writable(principal, env)
    versions = list(
        session.query(EnvironmentVersion).filter(EnvironmentVersion.environment_id == env.id)
    )
    for version in versions:
        session.delete(version)
    session.flush()
    for version in versions:
        _drop_files(session, version, settings)
    session.delete(env)
    return f"Deleted {env.owner}/{env.name}."
