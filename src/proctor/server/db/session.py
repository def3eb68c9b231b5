"""Engines and sessions for SQLite and PostgreSQL, usable from the app and from plain code.

`make_session_factory(settings)` returns a `Database`; `with db.read() as s:` gives a session
for queries, `with db.write() as s:` one that commits on success and rolls back on error.
On SQLite, write transactions start with `BEGIN IMMEDIATE` and take a process-wide lock:
SQLite serialises writers anyway, and taking the write lock up front avoids the
`database is locked` failure of a read transaction that later tries to write. The lock is
not re-entrant: never open `db.write()` inside another `db.write()` (or inside an endpoint
that holds a `WriteSession`) on the same thread of work.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event
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


class Database:
    """The database of one server: read and write sessions over one or two engines."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = create_db_engine(url)
        self.write_engine = create_db_engine(url, immediate=True) if self.is_sqlite else self.engine
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)
        self._write_lock: Any = threading.Lock() if self.is_sqlite else contextlib.nullcontext()

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
        settings.resolved_data_dir().mkdir(parents=True, exist_ok=True)
    return Database(url)
