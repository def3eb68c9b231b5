"""Alembic migrations of the platform schema, run programmatically (no alembic.ini)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, inspect

logger = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).resolve().parent
_MIGRATION_LOCK = 0x70726F63746F72  # PostgreSQL advisory lock key ("proctor")


def alembic_config(engine: Engine) -> Config:
    """An Alembic config bound to `engine`, pointing at this package's revisions."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to `revision` (all of them by default).

    Servers sharing a PostgreSQL database that start together migrate one at a time: the
    others wait, then find it at head.
    """
    with _one_migrator(engine):
        command.upgrade(alembic_config(engine), revision)


@contextmanager
def _one_migrator(engine: Engine) -> Iterator[None]:
    """Hold PostgreSQL's advisory migration lock for the block (SQLite has one writer)."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATION_LOCK})")
        try:
            yield
        finally:
            conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK})")


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Revert migrations down to `revision` (an empty schema by default)."""
    command.downgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty one."""
    if "alembic_version" not in inspect(engine).get_table_names():
        return None
    with engine.connect() as conn:
        row = conn.exec_driver_sql("SELECT version_num FROM alembic_version").first()
    return None if row is None else str(row[0])
