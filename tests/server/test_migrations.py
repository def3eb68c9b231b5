"""Migrations build the schema from an empty database, and revert to empty."""

from __future__ import annotations

from sqlalchemy import inspect

from proctor.server import migrations
from proctor.server.db.base import Base
from proctor.server.db.session import Database

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
