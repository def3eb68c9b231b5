"""A migrated database for launcher tests: SQLite always, PostgreSQL when
`PROCTOR_TEST_POSTGRES_URL` is set (a fresh database per test, dropped after it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.server.db.session import Database
from proctor.server.settings import Settings
from proctor.server.setup import prepare_database
from tests.support.databases import BACKENDS, fresh_database

ADMIN_KEY = "pk-hosted-launcher-test-admin-0123456789"


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A database migrated to head, with the admin key `ADMIN_KEY`."""
    settings = Settings(data_dir=tmp_path, bootstrap_key=ADMIN_KEY)
    with fresh_database(request.param, tmp_path) as url:
        database = Database(url)
        try:
            prepare_database(settings, database)
            yield database
        finally:
            database.dispose()
