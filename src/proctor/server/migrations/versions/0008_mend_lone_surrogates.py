"""lone surrogate halves stored before the boundary refused them become U+FFFD

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 02:00:00

A JSON `"\\ud800"` (half of a UTF-16 pair, what a model cut mid-emoji returns) was stored as
its escape inside JSON documents (`metadata`, samples, trace records, `metrics`...), and
every read that decoded it then failed to encode its answer: the dashboard page and
`GET /traces` answered 500 for good. The server now refuses such text (422 naming the
field); this mends what is already stored, replacing each half with U+FFFD and leaving
every other byte (and valid pairs) as it was.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# `\\` first, so an escaped backslash followed by `u` is never read as an escape; then a
# valid pair (kept), then a lone half (mended).
_ESCAPES = re.compile(
    r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_HALF = re.compile(r"[\ud800-\udfff]")

# JSON documents stored as text, as sent: (table, key column, column).
_TEXT = [
    ("evaluations", "id", "metadata_raw"),
    ("samples", "id", "data"),
    ("trace_records", "id", "data"),
]
# JSON columns: the server encoded them (escaping every non-ASCII character).
_JSON = [
    ("evaluations", "id", "metrics"),
    ("evaluations", "id", "tags"),
    ("evaluations", "id", "environments"),
    ("evaluations", "id", "environment_names"),
    ("environments", "id", "tags"),
    ("environment_versions", "id", "details"),
    ("hosted_evaluations", "evaluation_id", "config"),
    ("trace_uploads", "id", "context"),
    ("trace_records", "id", "summary"),
]


def mend_text(text: str) -> str:
    """JSON text with each escaped lone surrogate half replaced by `\\ufffd`."""
    return _ESCAPES.sub(lambda m: "\\ufffd" if len(m.group()) == 6 else m.group(), text)


def _mend_value(value: Any) -> Any:
    if isinstance(value, str):
        return _HALF.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_mend_value(k): _mend_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mend_value(v) for v in value]
    return value


def _suspects(bind: Any, table: sa.TableClause, column: sa.ColumnClause[Any]) -> list[Any]:
    # Only rows whose text holds a `\uD8..`-`\uDF..` escape can hold a half.
    text = sa.func.lower(sa.cast(column, sa.Text))
    found = sa.or_(*(text.like(f"%\\ud{c}%", escape="!") for c in "89abcdef"))
    return list(bind.execute(sa.select(table.c[0], column).where(found)).fetchall())


def upgrade() -> None:
    bind = op.get_bind()
    for name, key, column_name in _TEXT:
        table = sa.table(name, sa.column(key), sa.column(column_name, sa.Text))
        for row_key, text in _suspects(bind, table, table.c[column_name]):
            mended = mend_text(text)
            if mended != text:
                bind.execute(
                    table.update().where(table.c[key] == row_key).values({column_name: mended})
                )
    for name, key, column_name in _JSON:
        table = sa.table(name, sa.column(key), sa.column(column_name, sa.JSON))
        for row_key, value in _suspects(bind, table, table.c[column_name]):
            mended = _mend_value(value)
            if mended != value:
                bind.execute(
                    table.update().where(table.c[key] == row_key).values({column_name: mended})
                )


def downgrade() -> None:
    # The halves were never text; there is nothing to restore.
    pass
