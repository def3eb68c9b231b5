"""The database backends a test can run on: SQLite always, PostgreSQL when scripts/test set
`PROCTOR_TEST_POSTGRES_URL` (CI always does: there, a test marked `postgres` fails without it),
each test getting a fresh database of its own.

Migrating a database takes about half a second, so each process (each xdist worker) migrates
one template per backend once and every test gets a copy of it: a copied file for SQLite,
`CREATE DATABASE ... TEMPLATE` for PostgreSQL. Database names carry a random part, so workers
and concurrent runs on one PostgreSQL never collide.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.support.platform import Platform, postgres_url, start_platform
from tests.support.tools import missing

BACKENDS: list[Any] = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""Parameters for `params=` / `parametrize`: each is a `backend` for `fresh_database`."""


def require_postgres(item: pytest.Item) -> None:
    """Skip a test marked `postgres` when scripts/test's PostgreSQL is not there, or fail it
    under CI (tests/conftest.py calls it before each test; see `tests.support.tools`)."""
    if item.get_closest_marker("postgres") and postgres_url() is None:
        missing("PROCTOR_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL)")


_templates: dict[str, str] = {}
"""backend -> this process's migrated template (a SQLite file path, a PostgreSQL db name)."""


def drop_templates() -> None:
    """Remove this process's templates (tests/conftest.py calls it as the session ends)."""
    if "sqlite" in _templates:
        shutil.rmtree(Path(_templates.pop("sqlite")).parent, ignore_errors=True)
    if "postgres" in _templates:
        name = _templates.pop("postgres")
        _execute(_admin_url(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _psycopg(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _admin_url() -> str:
    return _psycopg(postgres_url() or "")


def _on(admin_url: str, database: str) -> str:
    return make_url(admin_url).set(database=database).render_as_string(hide_password=False)


def _migrate(url: str) -> None:
    from proctor.server import migrations
    from proctor.server.db.session import Database

    db = Database(url)
    try:
        migrations.upgrade(db.write_engine)
    finally:
        db.dispose()


def _sqlite_template() -> str:
    if "sqlite" not in _templates:
        directory = tempfile.mkdtemp(prefix="proctor-test-template-")
        path = Path(directory) / "template.db"
        _migrate(f"sqlite:///{path}")
        with sqlite3.connect(path) as conn:  # fold the WAL in, so the file alone is the db
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _templates["sqlite"] = str(path)
    return _templates["sqlite"]


def _postgres_template(admin_url: str) -> str:
    if "postgres" not in _templates:
        name = f"proctor_template_{uuid.uuid4().hex[:12]}"
        _execute(admin_url, f'CREATE DATABASE "{name}"')
        _templates["postgres"] = name
        _migrate(_on(admin_url, name))
    return _templates["postgres"]


def _execute(admin_url: str, statement: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(statement))
    finally:
        admin.dispose()


@contextmanager
def fresh_database(backend: str, tmp_path: Path, *, migrated: bool = True) -> Iterator[str]:
    """URL of a database of `backend` ("sqlite" or "postgres") of this test's own, migrated
    to the latest schema (empty with `migrated=False`), dropped afterwards."""
    if backend == "sqlite":
        path = tmp_path / "proctor.db"
        if migrated:
            shutil.copyfile(_sqlite_template(), path)
            os.chmod(path, 0o600)
        yield f"sqlite:///{path}"
        return
    admin_url = _admin_url()
    name = f"proctor_test_{uuid.uuid4().hex[:12]}"
    template = f' TEMPLATE "{_postgres_template(admin_url)}"' if migrated else ""
    _execute(admin_url, f'CREATE DATABASE "{name}"{template}')
    try:
        yield _on(admin_url, name)
    finally:
        _execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def platform_on(backend: str, data_dir: Path, **start: Any) -> Iterator[Platform]:
    """`proctor server` (see `start_platform`) on a fresh database of `backend`, stopped after."""
    with fresh_database(backend, data_dir) as url:
        platform = start_platform(data_dir, database_url=url, **start)
        try:
            yield platform
        finally:
            platform.process.stop()
