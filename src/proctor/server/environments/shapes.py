"""The API shapes of the hub's answers: an environment, a list row, its status, its versions."""

from __future__ import annotations

from sqlalchemy.orm import Session

from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import repository, versions
from proctor.server.environments.schemas import (
    EnvironmentOut,
    FinalizeOut,
    ListedEnvironment,
    OwnerOut,
    StatusOut,
    VersionOut,
    VersionRow,
)


def _owner_out(env: Environment) -> OwnerOut:
    kind = "platform" if env.kind == "installed" else "team" if env.team_id else "user"
    return OwnerOut(name=env.owner, type=kind)


def _tags(env: Environment) -> list[str]:
    return [str(t) for t in env.tags or []]


def _version_out(version: EnvironmentVersion | None) -> VersionOut | None:
    if version is None:
        return None
    return VersionOut(
        id=version.id,
        semantic_version=version.semantic_version,
        content_hash=version.content_hash,
        created_at=version.finalized_at or version.created_at,
    )


def to_out(
    session: Session,
    env: Environment,
    version: EnvironmentVersion | None = None,
    *,
    created: bool = False,
) -> EnvironmentOut:
    """The API shape of an environment, with `version` (default: its latest) spelled out."""
    latest = versions.latest(session, env)
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
        tags=_tags(env),
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
        tags=_tags(env),
        created_at=env.created_at,
        updated_at=env.updated_at or env.created_at,
    )


def status(env: Environment, session: Session) -> StatusOut:
    """The `status` shape of an environment."""
    return StatusOut(
        id=env.id,
        name=env.name,
        owner=_owner_out(env),
        description=env.description,
        visibility=env.visibility,
        latest_version=_version_out(versions.latest(session, env)),
    )


def version_rows(session: Session, env: Environment) -> list[VersionRow]:
    """The READY versions, newest first."""
    return [
        VersionRow(
            id=v.id,
            version=versions.label(v),
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


def finalized(version: EnvironmentVersion, message: str) -> FinalizeOut:
    """The answer of a version's finalize."""
    return FinalizeOut(
        success=True,
        message=message,
        version_id=version.id,
        semantic_version=version.semantic_version,
        content_hash=version.content_hash,
    )
