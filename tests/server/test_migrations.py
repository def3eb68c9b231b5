"""Migrations build the schema from an empty database, and revert to empty."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from proctor.server import migrations
from proctor.server.db.base import Base
from proctor.server.db.session import Database
from tests.support.databases import BACKENDS, fresh_database

TABLES = {
    "users",
    "teams",
    "team_members",
    "api_keys",
    "environments",
    "evaluations",
    "samples",
    "hosted_evaluations",
    "trace_uploads",
    "trace_records",
}


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of an empty database (the suite's `db_url` is already migrated)."""
    with fresh_database(request.param, tmp_path, migrated=False) as url:
        yield url


def test_upgrade_from_empty_then_downgrade_and_upgrade_again(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert migrations.current_revision(db.engine) is None
        migrations.upgrade(db.write_engine)
        tables = set(inspect(db.engine).get_table_names())
        assert tables >= TABLES
        assert migrations.current_revision(db.engine) is not None
        migrations.downgrade(db.write_engine)
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        migrations.upgrade(db.write_engine)
        assert set(inspect(db.engine).get_table_names()) >= TABLES
    finally:
        db.dispose()


def test_migrated_schema_matches_the_models(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrations.upgrade(db.write_engine)
        inspector = inspect(db.engine)
        for table in Base.metadata.sorted_tables:
            columns = {c["name"] for c in inspector.get_columns(table.name)}
            assert columns == {c.name for c in table.columns}, table.name
        unique = {tuple(u["column_names"]) for u in inspector.get_unique_constraints("samples")}
        assert ("evaluation_id", "sample_id") in unique and ("evaluation_id", "seq") in unique
    finally:
        db.dispose()


def test_package_paths_become_relative_to_the_data_dir(db_url: str) -> None:
    """Rows written with the server's own path (absolute, or relative to its cwd) are
    rewritten to `hub/<kind>s/<sha256>/<file>`, so a moved data dir keeps them."""
    db = Database(db_url)
    script = ScriptDirectory.from_config(migrations.alembic_config(db.write_engine))
    fix = next(r for r in script.walk_revisions() if r.path.endswith("_relative_package_paths.py"))
    sha = "a" * 64
    try:
        migrations.upgrade(db.write_engine, str(fix.down_revision))
        with db.write_engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO environments (id, owner, name, created_at, kind, visibility) "
                    "VALUES ('e1', 'alice', 'echo', '2026-01-01', 'pushed', 'PRIVATE')"
                )
            )
            for vid, wheel_path, source_path in (
                ("v1", f"data/hub/wheels/{sha}/echo-0.1.0-py3-none-any.whl", None),
                (
                    "v2",
                    f"/srv/p/hub/wheels/{sha}/echo-0.2.0-py3-none-any.whl",
                    f"/srv/p/hub/sources/{sha}/echo.tar.gz",
                ),
            ):
                conn.execute(
                    text(
                        "INSERT INTO environment_versions (id, environment_id, status, "
                        "content_hash, details, wheel_path, source_path, created_at) VALUES "
                        "(:id, 'e1', 'READY', :h, '{}', :w, :s, '2026-01-01')"
                    ),
                    {"id": vid, "h": vid * 32, "w": wheel_path, "s": source_path},
                )
        migrations.upgrade(db.write_engine)
        with db.engine.connect() as conn:
            rows = dict(
                (r[0], (r[1], r[2]))
                for r in conn.execute(
                    text("SELECT id, wheel_path, source_path FROM environment_versions")
                )
            )
        assert rows == {
            "v1": (f"hub/wheels/{sha}/echo-0.1.0-py3-none-any.whl", None),
            "v2": (
                f"hub/wheels/{sha}/echo-0.2.0-py3-none-any.whl",
                f"hub/sources/{sha}/echo.tar.gz",
            ),
        }
    finally:
        db.dispose()


def _insert(conn: Any, table: str, values: dict[str, Any]) -> None:
    """A row with `values`, and a placeholder in every other column that needs one."""
    row = dict(values)
    for column in inspect(conn).get_columns(table):
        name, kind = column["name"], column["type"]
        if name in row or column["nullable"] or column.get("default") is not None:
            continue
        if column.get("autoincrement") is True:
            continue
        try:
            python_type: Any = kind.python_type
        except NotImplementedError:
            python_type = None
        if python_type is bool:
            row[name] = False
        elif python_type in (int, float, Decimal):
            row[name] = 0
        elif python_type in (datetime, date):
            row[name] = datetime(2026, 1, 1)
        elif python_type in (dict, list) or "JSON" in str(kind).upper():
            row[name] = "{}"
        else:
            row[name] = "x"
    names = ", ".join(row)
    conn.execute(text(f"INSERT INTO {table} ({names}) VALUES (:{', :'.join(row)})"), row)


def test_an_upgrade_that_rebuilds_a_table_keeps_the_rows_that_reference_it(db_url: str) -> None:
    # SQLite's batch migrations copy `evaluations` and drop the old table; with foreign keys
    # on, that drop cascaded to every sample of an upgraded database.
    db = Database(db_url)
    try:
        migrations.upgrade(db.write_engine, "0002")
        with db.write_engine.begin() as conn:
            _insert(conn, "users", {"id": "u1"})
            _insert(conn, "evaluations", {"id": "e1", "user_id": "u1"})
            _insert(conn, "samples", {"evaluation_id": "e1", "sample_id": "s1"})
        migrations.upgrade(db.write_engine)
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT sample_id FROM samples")).scalars().all() == ["s1"]
            if db.engine.dialect.name == "sqlite":  # and the pool's connections check them again
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        db.dispose()
