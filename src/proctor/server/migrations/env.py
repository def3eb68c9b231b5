"""Alembic environment: runs revisions on the engine passed in `config.attributes`."""

from __future__ import annotations

from alembic import context

from proctor.server.db import models  # noqa: F401 - registers every table on the metadata
from proctor.server.db.base import Base

engine = context.config.attributes["engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
