"""sign-in challenges of `prime login`

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 01:45:00

`auth_challenges` holds one row per `prime login`: the code the user approves in the
dashboard, the SHA-256 of the CLI's polling token, its public key, who approved it and when
it was collected (once).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "auth_challenges",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("status_token_hash", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=True),
        sa.Column("client_ip", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("approved_by", sa.String(length=64), nullable=True),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("denied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["approved_by"],
            ["users.id"],
            name=op.f("fk_auth_challenges_approved_by_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_auth_challenges")),
        sa.UniqueConstraint("code", name=op.f("uq_auth_challenges_code")),
    )
    op.create_index(
        op.f("ix_auth_challenges_client_ip"), "auth_challenges", ["client_ip"], unique=False
    )
    op.create_index(
        op.f("ix_auth_challenges_created_at"), "auth_challenges", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_auth_challenges_created_at"), table_name="auth_challenges")
    op.drop_index(op.f("ix_auth_challenges_client_ip"), table_name="auth_challenges")
    op.drop_table("auth_challenges")
