"""Alembic environment: runs revisions on the engine passed in `config.attributes`."""

from __future__ import annotations

from alembic import context

from proctor.server.db import models  # noqa: F401 - registers every table on the metadata
from proctor.server.db.base import Base

engine = context.config.attributes["engine"]

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    # A batch migration copies a table, drops the old one and renames the copy; with foreign
    # keys on, dropping `evaluations` would cascade to every sample. The pragma works only
    # outside a transaction, so it goes to the driver's connection before SQLAlchemy begins.
    driver = connection.connection.dbapi_connection if sqlite else None
    if driver is not None:
        driver.execute("PRAGMA foreign_keys=OFF")
    try:
        context.configure(
            connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        if driver is not None:
            driver.execute("PRAGMA foreign_keys=ON")
