"""Secrets the server keeps in its data directory, and the signatures made with them.

Each secret is a file of the data directory (mode 0600), created on first use and read once
per process; rotating one (replacing the file) takes effect at the next server start. The
dashboard signs its session cookies with one, the hub its download URLs with another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
from pathlib import Path

from proctor.server.settings import Settings

_lock = threading.Lock()
_secrets: dict[Path, bytes] = {}  # per file: read once, not on every request


def data_dir_secret(settings: Settings, name: str) -> bytes:
    """The secret in `<data dir>/<name>`, created (32 random bytes, hex) if absent."""
    path = settings.resolved_data_dir() / name
    with _lock:
        cached = _secrets.get(path)
        if cached is not None:
            return cached
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:  # O_EXCL: two workers starting together must agree on one secret
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_hex(32))
        secret = _secrets[path] = path.read_text().strip().encode("ascii")
        return secret


def sign(secret: bytes, payload: str) -> str:
    """HMAC-SHA256 of `payload`, URL-safe base64 without padding."""
    digest = hmac.new(secret, payload.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def signed_by(secret: bytes, payload: str, signature: str) -> bool:
    """Whether `signature` is `sign(secret, payload)` (compared in constant time)."""
    return hmac.compare_digest(signature, sign(secret, payload))
