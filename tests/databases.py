"""The database backends a test can run on: SQLite always, PostgreSQL when scripts/test set
`PROCTOR_TEST_POSTGRES_URL` (CI always does), each test getting a fresh database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import Platform, postgres_url, start_platform

BACKENDS: list[Any] = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(
                postgres_url() is None, reason="PROCTOR_TEST_POSTGRES_URL is not set"
            ),
        ],
    ),
]
"""Parameters for `params=` / `parametrize`: each is a `backend` for `fresh_database`."""


def _psycopg(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


@contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """URL of an empty database of `backend` ("sqlite" or "postgres"), dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'proctor.db'}"
        return
    admin_url = _psycopg(postgres_url() or "")
    name = f"proctor_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def platform_on(backend: str, data_dir: Path, **start: Any) -> Iterator[Platform]:
    """`proctor server` (see `start_platform`) on a fresh database of `backend`, stopped after."""
    with fresh_database(backend, data_dir) as url:
        platform = start_platform(data_dir, database_url=url, **start)
        try:
            yield platform
        finally:
            platform.process.stop()
