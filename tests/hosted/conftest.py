"""A migrated database for launcher tests: SQLite always, PostgreSQL when
`PROCTOR_TEST_POSTGRES_URL` is set (a fresh database per test, dropped after it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from proctor.server.db.session import Database
from proctor.server.settings import Settings
from proctor.server.setup import prepare_database
from tests.conftest import postgres_url

ADMIN_KEY = "pk-hosted-launcher-test-admin-0123456789"


def _backends() -> list[Any]:
    missing = postgres_url() is None
    return [
        "sqlite",
        pytest.param(
            "postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(missing, reason="PROCTOR_TEST_POSTGRES_URL is not set"),
            ],
        ),
    ]


@pytest.fixture(params=_backends())
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A database migrated to head, with the admin key `ADMIN_KEY`."""
    settings = Settings(data_dir=tmp_path, bootstrap_key=ADMIN_KEY)
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path / 'proctor.db'}")
        prepare_database(settings, database)
        yield database
        database.dispose()
        return
    admin_url = (postgres_url() or "").replace("postgresql://", "postgresql+psycopg://", 1)
    name = f"proctor_hosted_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    database = Database(make_url(admin_url).set(database=name).render_as_string(False))
    try:
        prepare_database(settings, database)
        yield database
    finally:
        database.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
