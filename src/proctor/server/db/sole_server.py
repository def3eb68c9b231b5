"""SQLite serves one `proctor server` process: the first holds a lock, a second is refused.

The lock is an exclusive `flock` on `<database file>.server`, which holds the holder's pid
and host for the refusal's sentence; the kernel drops it when the process ends, however it
ends, so a killed server never leaves a stale lock behind. PostgreSQL needs none of this:
several servers share it (docs/scale.md, "Several servers").
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import TextIO

from sqlalchemy.engine import make_url

from proctor.errors import ConfigError


class SoleServer:
    """The lock one server holds on its SQLite file while it serves; `release()` ends it."""

    def __init__(self, handle: TextIO) -> None:
        self._handle = handle

    def release(self) -> None:
        """Let another server open the file (also done by the kernel when the process ends)."""
        self._handle.close()


def sqlite_path(database_url: str) -> Path | None:
    """The SQLite file a URL names (None: not SQLite, or an in-memory database)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def hold_sqlite(database_url: str) -> SoleServer | None:
    """Take the one-server lock of a SQLite database (None for PostgreSQL).

    Raises:
        ConfigError: another server process serves the same SQLite file.
    """
    path = sqlite_path(database_url)
    if path is None:
        return None
    lock_path = path.with_name(path.name + ".server")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # Held open (and locked) for the server's lifetime.
    handle = os.fdopen(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600), "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"the SQLite database {path} is already served by proctor server {holder}, and "
            "SQLite serves one server process; stop that one, or run several servers on "
            "PostgreSQL (PROCTOR_DATABASE_URL)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return SoleServer(handle)
