"""dashboard sessions kept server-side, so signing out revokes the cookie

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 01:20:00

`web_sessions` holds one row per dashboard sign-in (the SHA-256 of the id its signed cookie
carries); sign-out sets `revoked_at`. Cookies of the earlier format name no row and simply
ask their browser to sign in again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_web_sessions_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_web_sessions")),
    )
    op.create_index(op.f("ix_web_sessions_key_id"), "web_sessions", ["key_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_web_sessions_key_id"), table_name="web_sessions")
    op.drop_table("web_sessions")
