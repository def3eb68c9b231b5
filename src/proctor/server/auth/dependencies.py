"""The `CurrentPrincipal` dependency: authenticates the request's API key."""

from __future__ import annotations

import logging
import threading
import time
from typing import Annotated

from fastapi import Depends, Request

from proctor.server.auth import service
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.session import Database
from proctor.server.deps import get_database

logger = logging.getLogger(__name__)

# A key's last use is written at most this often, so reads stay reads.
LAST_USED_INTERVAL_S = 60.0

_last_recorded: dict[str, float] = {}
_last_recorded_lock = threading.Lock()


def key_from_headers(request: Request) -> str | None:
    """The API key of a request: `Authorization: Bearer <key>` or `x-api-key: <key>`."""
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key", "").strip() or None


def _due_for_recording(key_id: str) -> bool:
    now = time.monotonic()
    with _last_recorded_lock:
        if now - _last_recorded.get(key_id, float("-inf")) < LAST_USED_INTERVAL_S:
            return False
        _last_recorded[key_id] = now
        return True


def get_principal(request: Request, db: Annotated[Database, Depends(get_database)]) -> Principal:
    """Authenticate the request; 401 without a valid key."""
    with db.read() as session:
        principal = service.authenticate(session, key_from_headers(request))
    if _due_for_recording(principal.key_id):
        try:
            # Non-blocking: the request may already hold SQLite's write lock (WriteSession).
            with db.try_write() as session:
                if session is not None:
                    service.record_use(session, principal.key_id, utcnow())
        except Exception:  # bookkeeping only: never fail a request over it
            logger.warning(
                "could not record the last use of key %s", principal.key_id, exc_info=True
            )
    return principal


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
