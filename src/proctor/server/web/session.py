"""Dashboard sign-in: a signed, HTTP-only session cookie naming the API key's id.

The cookie holds `key_id.issued_at.signature` (HMAC-SHA256 with a server secret kept in the
data directory, created on first use with mode 0600), never the key itself. Each request
re-reads the key, so revoking it ends every session at once. CSRF: the cookie is
`SameSite=Lax` and every state change (sign-in, sign-out) is a POST, which Lax cookies do not
accompany across sites; that is the whole defence for now.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from pathlib import Path

from fastapi import Request, Response
from sqlalchemy.orm import Session

from proctor.server.auth import repository as auth_repository
from proctor.server.auth import service as auth_service
from proctor.server.auth.schemas import Principal
from proctor.server.errors import LoginRequired, Unauthenticated
from proctor.server.settings import Settings

logger = logging.getLogger(__name__)

COOKIE_NAME = "proctor_session"
SESSION_MAX_AGE_S = 7 * 24 * 3600
SECRET_FILE = "web-session.secret"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

_secret_lock = threading.Lock()
_secrets: dict[Path, bytes] = {}  # per data dir: read once, not on every page request
_warned_plain_http = False


def session_secret(settings: Settings) -> bytes:
    """The signing secret, read once from (or created in) the data directory.

    Rotating it (replacing the file) takes effect at the next server start.
    """
    path: Path = settings.resolved_data_dir() / SECRET_FILE
    with _secret_lock:
        cached = _secrets.get(path)
        if cached is not None:
            return cached
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_EXCL: two workers starting together must not each write a different secret.
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_hex(32))
        secret = _secrets[path] = path.read_text().strip().encode("ascii")
        return secret


def _sign(secret: bytes, payload: str) -> str:
    digest = hmac.new(secret, payload.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def make_cookie_value(secret: bytes, key_id: str, *, now: float | None = None) -> str:
    """A signed session value for `key_id`."""
    payload = f"{key_id}.{int(now if now is not None else time.time())}"
    return f"{payload}.{_sign(secret, payload)}"


def read_cookie_value(secret: bytes, value: str, *, now: float | None = None) -> str | None:
    """The key id in a session value, or None if it is forged, malformed or expired."""
    payload, _, signature = value.rpartition(".")
    key_id, _, issued = payload.rpartition(".")
    if not key_id or not issued.isdigit():
        return None
    if not hmac.compare_digest(signature, _sign(secret, payload)):
        return None
    age = (now if now is not None else time.time()) - int(issued)
    return key_id if 0 <= age <= SESSION_MAX_AGE_S else None


def principal_for_key_id(session: Session, key_id: str) -> Principal | None:
    """The principal of a live, unscoped key by id; None if it is gone or revoked."""
    key = auth_repository.key_by_id(session, key_id)
    if key is None or key.revoked_at is not None or key.scope_evaluation_id is not None:
        return None
    user = auth_repository.user_by_id(session, key.user_id)
    if user is None:
        return None
    return Principal(
        key_id=key.id,
        user_id=user.id,
        user_name=user.name,
        is_admin=key.is_admin,
        team_ids=frozenset(auth_repository.team_ids_of(session, user.id)),
    )


def sign_in(session: Session, api_key: str) -> Principal:
    """Check a key typed into the sign-in form.

    Raises:
        Unauthenticated: The key is empty, unknown, revoked or scoped to one evaluation.
    """
    principal = auth_service.authenticate(session, api_key.strip() or None)
    if principal.scope_evaluation_id is not None:
        raise Unauthenticated(
            "This key is limited to one evaluation; sign in with an unscoped key "
            "(create one with `proctor keys create`)."
        )
    return principal


def current_principal(request: Request, session: Session, settings: Settings) -> Principal:
    """The signed-in principal of a page request.

    Raises:
        LoginRequired: No cookie, or one that is invalid, expired or names a revoked key.
    """
    value = request.cookies.get(COOKIE_NAME)
    key_id = read_cookie_value(session_secret(settings), value) if value else None
    principal = principal_for_key_id(session, key_id) if key_id else None
    if principal is None:
        raise LoginRequired("Sign in with an API key to see this page.")
    request.state.user_name = principal.user_name  # lets an error page keep the header
    return principal


def _secure(request: Request, settings: Settings) -> bool:
    # Browsers accept Secure cookies over HTTPS and on loopback; on plain HTTP elsewhere a
    # Secure cookie would be dropped and sign-in would loop, so it is left off (and logged).
    if request.url.scheme == "https" or settings.resolved_public_url().startswith("https:"):
        return True
    if (request.url.hostname or "") in LOOPBACK_HOSTS:
        return True
    global _warned_plain_http
    if not _warned_plain_http:
        _warned_plain_http = True
        logger.warning(
            "dashboard served over plain HTTP to %s; its session cookie is not marked Secure "
            "(serve it over HTTPS and set PROCTOR_PUBLIC_URL to an https URL)",
            request.url.hostname,
        )
    return False


def set_session_cookie(
    response: Response, request: Request, settings: Settings, principal: Principal
) -> None:
    """Attach the session cookie for `principal` to `response`."""
    response.set_cookie(
        COOKIE_NAME,
        make_cookie_value(session_secret(settings), principal.key_id),
        max_age=SESSION_MAX_AGE_S,
        httponly=True,
        secure=_secure(request, settings),
        samesite="lax",
        path="/",
    )


def clear_session_cookie(response: Response, request: Request, settings: Settings) -> None:
    """Remove the session cookie."""
    response.delete_cookie(
        COOKIE_NAME, path="/", httponly=True, secure=_secure(request, settings), samesite="lax"
    )
