"""Pushing a version to the hub: staging, upload URLs, uploads and the finalize steps.

A push is the public CLI's sequence: resolve (get-or-create the entry, `service.resolve`),
announce the wheel, PUT it to the upload URL, finalize it, announce the version (and its
source archive), PUT that, finalize the version. Everything before the last step is a
PENDING row nobody sees; the version finalize makes it READY and the environment's latest.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.db.session import Database
from proctor.server.environments import (
    access,
    artifacts,
    drivers,
    repository,
    shapes,
    versions,
)
from proctor.server.environments.schemas import (
    FinalizeOut,
    UploadSlot,
    VersionRequest,
    WheelRequest,
)
from proctor.server.errors import Conflict, Forbidden, InvalidInput, NotVisible
from proctor.server.settings import Settings

UPLOAD_PREFIX = "/environmentshub/uploads"
"""Upload URLs live under this path of the API; the secret in them is the only credential."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _upload_url(base_url: str, version: EnvironmentVersion, kind: str) -> str:
    secret = secrets.token_urlsafe(32)
    version.upload_token_hash = _digest(secret)
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


def _announced(
    session: Session, env: Environment, version_id: str, what: str
) -> EnvironmentVersion:
    version = repository.version_by_id(session, version_id)
    if version is None or version.environment_id != env.id:
        raise NotVisible(f"No {what} {version_id!r} was announced for {env.owner}/{env.name}.")
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
    env = access.pushable(session, principal, env_id)
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
    stored = artifacts.locate(settings.resolved_data_dir(), version.wheel_path)
    if stored is not None and stored.is_file():
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
    if version is None or expected is None or not hmac.compare_digest(expected, _digest(secret)):
        raise Forbidden(
            "This upload URL is not valid (used up or never issued); push again for a new one.",
            code="upload_forbidden",
        )
    if version.status == "READY":
        return UploadTarget(version_id, kind, None, version.content_hash, None)
    announced = {
        "wheel": (version.wheel_sha256, version.wheel_filename, version.wheel_size),
        "source": (version.source_sha256, version.source_filename, None),
    }
    sha256, filename, size = announced.get(kind, (None, None, None))
    if not sha256 or not filename:
        raise InvalidInput(f"Nothing of kind {kind!r} was announced for this push; push again.")
    path = artifacts.stored_path(settings.hub_dir(), kind, sha256, filename)
    return UploadTarget(version_id, kind, path, sha256, size)


def record_upload(session: Session, target: UploadTarget) -> None:
    """Note that an upload arrived whole (its path is stored relative to the data dir)."""
    version = repository.version_by_id(session, target.version_id)
    if version is None or target.path is None:
        return
    stored = artifacts.relative_to_data_dir(str(target.path))
    if target.kind == "wheel":
        version.wheel_path = stored
    else:
        version.source_path = stored


def finalize_wheel(
    db: Database, principal: Principal, env_id: str, wheel_id: str, settings: Settings
) -> str:
    """Check the uploaded wheel and read which environments it provides.

    The wheel is read between two short sessions, never inside a write transaction (on SQLite
    that would hold every writer back while it is inspected).
    """
    with db.read() as session:
        uploaded = _uploaded_wheel(session, principal, env_id, wheel_id, settings)
    if uploaded is None:
        return "already published"
    wheel, name, label = uploaded
    driver: drivers.Driver | None = None
    try:
        read = artifacts.read_wheel(wheel)
        driver = drivers.driver_of(wheel, read, name=name, label=label)
        facts: artifacts.WheelFacts | None = read
        refusal: InvalidInput | None = None
    except InvalidInput as e:
        facts, refusal = None, e
    with db.write() as session:
        env = access.pushable(session, principal, env_id)
        version = _announced(session, env, wheel_id, "wheel")
        if version.status == "READY":
            return "already published"
        if facts is None:
            path, version.wheel_path = version.wheel_path, None
            versions.drop_file(session, path, settings)
        else:
            version.details = {
                **(version.details or {}),
                "distribution": facts.name,
                "distribution_version": facts.version,
                "requires_dist": facts.requires_dist,
                "entry_points": facts.entry_points,
                "summary": facts.summary,
                **(driver.details() if driver is not None else {}),
            }
    if refusal is not None:
        raise refusal
    return "wheel uploaded"


def _uploaded_wheel(
    session: Session, principal: Principal, env_id: str, wheel_id: str, settings: Settings
) -> tuple[Path, str, str] | None:
    """The uploaded wheel to check, the environment's name and the push's label (None: the
    version is already published)."""
    env = access.pushable(session, principal, env_id)
    version = _announced(session, env, wheel_id, "wheel")
    if version.status == "READY":
        return None
    wheel = artifacts.locate(settings.resolved_data_dir(), version.wheel_path)
    if wheel is None or not wheel.is_file():
        raise Conflict(
            "The wheel was not uploaded yet; PUT it to the upload URL, then finalize.",
            code="upload_missing",
        )
    return wheel, env.name, versions.full_name(env, version)


def prepare_version(
    session: Session, principal: Principal, env_id: str, body: VersionRequest, base_url: str
) -> UploadSlot:
    """Stage the version (and its source archive) for the content hash of the wheel."""
    env = access.pushable(session, principal, env_id)
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
    env = access.pushable(session, principal, env_id)
    version = _announced(session, env, version_id, "version")
    label = versions.full_name(env, version)
    if version.status == "READY":
        version.upload_token_hash = None
        return shapes.finalized(
            version, f"{label} is already published with this content; nothing changed."
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
    versions.set_latest(env, version, at=now)
    return shapes.finalized(version, f"Published {label}.")
