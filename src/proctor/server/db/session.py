"""Engines and sessions for SQLite and PostgreSQL, usable from the app and from plain code.

`make_session_factory(settings)` returns a `Database`; `with db.read() as s:` gives a session
for queries, `with db.write() as s:` one that commits on success and rolls back on error.
On SQLite, write transactions start with `BEGIN IMMEDIATE` and take a process-wide lock:
SQLite serialises writers anyway, and taking the write lock up front avoids the
`database is locked` failure of a read transaction that later tries to write. The lock is
not re-entrant: never open `db.write()` inside another `db.write()` (or inside an endpoint
that holds a `WriteSession`) on the same thread of work; a writer that waits long logs a
warning naming where the holder took the lock, so such a mistake is not a silent hang.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from proctor.server.boundary import guard_engine
from proctor.server.settings import Settings

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 32 * 1024
SQLITE_MMAP_BYTES = 256 * 1024 * 1024


def _configure_sqlite(engine: Engine, *, begin: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself instead of pysqlite's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # A deleted row (a cleared secret, a revoked key) is overwritten, not left in the file.
        cursor.execute("PRAGMA secure_delete=ON")
        # Larger page cache and memory-mapped reads: fewer syscalls on big sample tables.
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)


def create_db_engine(url: str, *, immediate: bool = False) -> Engine:
    """An engine for `url`; on SQLite, `immediate` makes every transaction a write transaction."""
    if url.startswith("sqlite"):
        db_path = make_url(url).database
        if db_path and db_path != ":memory:" and not db_path.startswith("file:"):
            make_private_file(Path(db_path))
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            pool_size=8,
            max_overflow=32,
        )
        _configure_sqlite(engine, begin="BEGIN IMMEDIATE" if immediate else "BEGIN")
    else:
        engine = create_engine(url, pool_size=10, max_overflow=30, pool_pre_ping=True)
    guard_engine(engine)  # values the columns cannot hold answer 422 on every backend
    return engine


class _WriteLock:
    """SQLite's one-writer lock, loud instead of silent when a writer waits too long.

    A `db.write()` inside another one on the same thread of work waits forever for itself;
    instead of hanging quietly, a writer that has waited `warn_after_s` logs a warning naming
    where the holder took the lock, and keeps waiting (a slow writer may still finish).
    Not re-entrant on purpose: a second write transaction would wait on SQLite's own lock.
    """

    warn_after_s = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: tuple[str, str, float] | None = None  # thread, code location, since

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock (or, not blocking, return False at once when it is held)."""
        if not blocking:
            taken = self._lock.acquire(blocking=False)
        else:
            taken = self._lock.acquire(timeout=self.warn_after_s)
            while not taken:
                self._warn_waiting()
                taken = self._lock.acquire(timeout=self.warn_after_s)
        if taken:
            self._holder = (threading.current_thread().name, _caller(), time.monotonic())
        return taken

    def release(self) -> None:
        self._holder = None
        self._lock.release()

    def _warn_waiting(self) -> None:
        holder = self._holder
        if holder is None:
            return
        thread, where, since = holder
        logger.warning(
            "a SQLite write has waited %.0f s for the write lock, held for %.0f s by thread %s "
            "since %s; a db.write() opened inside another one on the same thread never returns "
            "(do the work in the outer session)",
            self.warn_after_s,
            time.monotonic() - since,
            thread,
            where,
        )

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


def _caller() -> str:
    """`file:line` of the first frame outside this module and contextlib (who took the lock)."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Database:
    """The database of one server: read and write sessions over one or two engines."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = create_db_engine(url)
        self.write_engine = create_db_engine(url, immediate=True) if self.is_sqlite else self.engine
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)
        self._write_lock: Any = _WriteLock() if self.is_sqlite else contextlib.nullcontext()

    def new_read_session(self) -> Session:
        """A session for queries that the caller closes (creating one does no I/O)."""
        return self._read()

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for queries; closing it rolls back, and loaded objects stay readable."""
        with self._read() as session:
            yield session

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Session]:
        # The caller holds the write lock (SQLite) for the whole block.
        with self._write() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A session that commits when the block succeeds and rolls back when it raises."""
        with self._write_lock, self._transaction() as session:
            yield session

    @contextlib.contextmanager
    def try_write(self) -> Iterator[Session | None]:
        """Like `write`, but yields None at once instead of waiting for SQLite's write lock.

        For bookkeeping that may be skipped (e.g. a key's last use) and that may run while the
        same request already holds the lock.
        """
        lock = self._write_lock
        if isinstance(lock, contextlib.nullcontext):
            with self.write() as session:
                yield session
            return
        if not lock.acquire(blocking=False):
            yield None
            return
        try:
            with self._transaction() as session:
                yield session
        finally:
            lock.release()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self.write_engine is not self.engine:
            self.write_engine.dispose()


def make_session_factory(settings: Settings) -> Database:
    """The `Database` for `settings`, creating the data directory for a SQLite file."""
    url = settings.resolved_database_url()
    if url.startswith("sqlite") and ":memory:" not in url:
        make_private_dir(settings.resolved_data_dir())
    return Database(url)


def make_private_dir(path: Path) -> None:
    """Create `path` (and its parents) readable only by this user (0700); an existing one is
    left as it is."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)


def make_private_file(path: Path) -> None:
    """Make the SQLite file at `path` readable only by this user (0600), creating it empty if
    needed; SQLite creates its `-wal` and `-shm` files with the database file's mode, and
    ones left by an earlier version are tightened too."""
    if not path.parent.is_dir():
        return  # SQLite reports the missing directory itself
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for sibling in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if sibling.stat().st_uid == os.getuid() and sibling.stat().st_mode & 0o077:
                sibling.chmod(0o600)
        except FileNotFoundError:
            pass
