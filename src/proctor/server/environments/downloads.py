"""Download URLs of a version's packages (wheel and source), signed for the key that asked.

`@latest`/`@<version>` answer `wheel_url` and `package_url`: URLs of this server that name the
version, the artifact, an expiry and the asking key's id, signed with a secret kept in the
data directory. A download checks the signature and the expiry, then that the key is still
live and still sees the environment, so a URL handed to `pip` (which sends no credentials)
works for its owner and stops working when the key is revoked or loses its team.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import access, artifacts, repository
from proctor.server.errors import Forbidden, NotVisible
from proctor.server.settings import Settings
from proctor.server.signing import data_dir_secret, sign, signed_by
from proctor.server.web.session import principal_for_key_id

DOWNLOAD_PREFIX = "/environmentshub/downloads"
URL_TTL_S = 24 * 3600
"""How long a download URL works after `@version` handed it out."""
SECRET_FILE = "hub-download.secret"
KINDS = ("wheel", "source")


def _sign(settings: Settings, payload: str) -> str:
    return sign(data_dir_secret(settings, SECRET_FILE), payload)


def _payload(version_id: str, kind: str, expires: int, key_id: str) -> str:
    return f"{version_id}:{kind}:{expires}:{key_id}"


def url(
    base_url: str,
    settings: Settings,
    principal: Principal,
    version: EnvironmentVersion,
    kind: str,
    *,
    now: float | None = None,
) -> str | None:
    """The signed download URL of one artifact of `version` (None if it has none).

    The path ends in the artifact's file name, so pip and uv read it as a wheel or sdist.
    """
    filename = version.wheel_filename if kind == "wheel" else version.source_filename
    stored = version.wheel_path if kind == "wheel" else version.source_path
    if not filename or not stored or version.status != "READY":
        return None
    expires = int(now if now is not None else time.time()) + URL_TTL_S
    signature = _sign(settings, _payload(version.id, kind, expires, principal.key_id))
    return (
        f"{base_url}{DOWNLOAD_PREFIX}/{version.id}/{kind}/{quote(filename)}"
        f"?expires={expires}&key={quote(principal.key_id)}&sig={signature}"
    )


@dataclass(frozen=True)
class Download:
    """A checked download: the file and the name to serve it under."""

    path: Path
    filename: str
    media_type: str


def _refused() -> Forbidden:
    return Forbidden(
        "This download URL is not valid (expired, forged or its key revoked); ask "
        "`GET /environmentshub/{owner}/{name}/@latest` for a new one.",
        code="download_forbidden",
    )


def check(
    session: Session,
    settings: Settings,
    version_id: str,
    kind: str,
    *,
    expires: int,
    key_id: str,
    signature: str,
    now: float | None = None,
) -> Download:
    """The file a download URL names, if its signature, expiry and key still hold.

    Raises:
        Forbidden: Forged, expired, or its key is revoked.
        NotVisible: The key no longer sees the environment, or the file is gone.
    """
    payload = _payload(version_id, kind, expires, key_id)
    if kind not in KINDS or not signed_by(
        data_dir_secret(settings, SECRET_FILE), payload, signature
    ):
        raise _refused()
    if expires < int(now if now is not None else time.time()):
        raise _refused()
    principal = principal_for_key_id(session, key_id)
    if principal is None:
        raise _refused()
    version = repository.version_by_id(session, version_id)
    env: Environment | None = (
        repository.by_id(session, version.environment_id) if version is not None else None
    )
    if version is None or env is None or version.status != "READY":
        raise NotVisible("This version is no longer on the hub; ask for `@latest` again.")
    if not access.readable(principal, env):
        raise access.hidden(env.owner, env.name)
    stored = version.wheel_path if kind == "wheel" else version.source_path
    filename = version.wheel_filename if kind == "wheel" else version.source_filename
    path = artifacts.locate(settings.resolved_data_dir(), stored)
    if path is None or not filename or not path.is_file():
        raise NotVisible(
            f"The {kind} of {env.owner}/{env.name} is missing from the data dir; push it again."
        )
    media = "application/zip" if kind == "wheel" else "application/gzip"
    return Download(path=path, filename=filename, media_type=media)
