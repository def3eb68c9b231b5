"""Dashboard sign-in: a signed, HTTP-only session cookie naming a server-side session.

The cookie holds `session_id.signature` (HMAC-SHA256 with a server secret kept in the data
directory, created on first use with mode 0600), never the key. The session's row
(`web_sessions`, holding only the SHA-256 of the id) names the API key it was opened with and
when it expires; signing out marks it revoked, so a copied cookie stops working at once. Each
request re-reads the row and the key, so revoking the key ends every session too. Forged
cross-site requests are refused by `proctor.server.web.guard`.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import datetime, timedelta

from fastapi import Request, Response
from sqlalchemy.orm import Session

from proctor.server.auth import repository as auth_repository
from proctor.server.auth import service as auth_service
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import as_utc, utcnow
from proctor.server.db.models import WebSession
from proctor.server.errors import LoginRequired, Unauthenticated
from proctor.server.settings import Settings
from proctor.server.signing import data_dir_secret, sign, signed_by

logger = logging.getLogger(__name__)

COOKIE_NAME = "proctor_session"
SESSION_MAX_AGE_S = 7 * 24 * 3600
SECRET_FILE = "web-session.secret"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

_warned_plain_http = False


def session_secret(settings: Settings) -> bytes:
    """The cookie-signing secret of this data directory (`proctor.server.signing`)."""
    return data_dir_secret(settings, SECRET_FILE)


def make_cookie_value(secret: bytes, session_id: str) -> str:
    """A signed cookie value for `session_id`."""
    return f"{session_id}.{sign(secret, session_id)}"


def read_cookie_value(secret: bytes, value: str) -> str | None:
    """The session id in a cookie value, or None if it is forged or malformed."""
    session_id, _, signature = value.rpartition(".")
    if not session_id or not signed_by(secret, session_id, signature):
        return None
    return session_id


def _id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def open_session(session: Session, principal: Principal, *, now: datetime | None = None) -> str:
    """Record a new dashboard session for `principal`'s key; returns its id (for the cookie)."""
    when = now or utcnow()
    session_id = secrets.token_urlsafe(32)
    session.add(
        WebSession(
            id_hash=_id_hash(session_id),
            key_id=principal.key_id,
            created_at=when,
            expires_at=when + timedelta(seconds=SESSION_MAX_AGE_S),
        )
    )
    session.flush()
    return session_id


def live_key_id(session: Session, session_id: str, *, now: datetime | None = None) -> str | None:
    """The key id of a session that exists, is not revoked and has not expired."""
    row = session.get(WebSession, _id_hash(session_id))
    if row is None or row.revoked_at is not None:
        return None
    expires = as_utc(row.expires_at)
    if expires is None or expires <= (now or utcnow()):
        return None
    return row.key_id


def revoke_session(session: Session, request: Request, settings: Settings) -> None:
    """Revoke the session the request's cookie names (nothing if it names none)."""
    value = request.cookies.get(COOKIE_NAME)
    session_id = read_cookie_value(session_secret(settings), value) if value else None
    if session_id is None:
        return
    row = session.get(WebSession, _id_hash(session_id))
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()


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
    session_id = read_cookie_value(session_secret(settings), value) if value else None
    key_id = live_key_id(session, session_id) if session_id else None
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
    response: Response, request: Request, settings: Settings, session_id: str
) -> None:
    """Attach the cookie of the session `session_id` (from `open_session`) to `response`."""
    response.set_cookie(
        COOKIE_NAME,
        make_cookie_value(session_secret(settings), session_id),
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
