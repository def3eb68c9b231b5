"""The shared declarative base and column helpers of every table."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import DateTime, MetaData
from sqlalchemy.orm import DeclarativeBase

# Stable constraint names, so Alembic migrations can refer to them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base class of all proctor tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: DateTime(timezone=True)}


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh random identifier (UUID4 text)."""
    return str(uuid.uuid4())


def as_utc(value: datetime | None) -> datetime | None:
    """Attach UTC to a naive timestamp read back from SQLite, which drops the zone."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def iso_utc(value: datetime | None) -> str | None:
    """A timestamp as the API writes it: ISO 8601 in UTC, or None."""
    value = as_utc(value)
    return None if value is None else value.isoformat()
