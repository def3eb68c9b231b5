"""the environments hub: visibility and kind of environments, published versions

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00

Environments gain `kind` (installed with the server, pushed, or a name only), `visibility`,
a description, tags and `updated_at`; `environment_versions` holds each published package
(its wheel and source archive live in the data dir, named by their SHA-256).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("environments", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=16), server_default="named", nullable=False)
        )
        batch_op.add_column(
            sa.Column("visibility", sa.String(length=16), server_default="PRIVATE", nullable=False)
        )
        batch_op.add_column(sa.Column("description", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("tags", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "environment_versions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("environment_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("semantic_version", sa.String(length=64), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("wheel_filename", sa.String(length=300), nullable=True),
        sa.Column("wheel_sha256", sa.String(length=64), nullable=True),
        sa.Column("wheel_size", sa.BigInteger(), nullable=True),
        sa.Column("wheel_path", sa.Text(), nullable=True),
        sa.Column("source_filename", sa.String(length=300), nullable=True),
        sa.Column("source_sha256", sa.String(length=64), nullable=True),
        sa.Column("source_path", sa.Text(), nullable=True),
        sa.Column("upload_token_hash", sa.String(length=64), nullable=True),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finalized_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.id"],
            name=op.f("fk_environment_versions_environment_id_environments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_environment_versions_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_environment_versions")),
        sa.UniqueConstraint(
            "environment_id", "content_hash", name="uq_environment_versions_environment_hash"
        ),
    )
    with op.batch_alter_table("environment_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_environment_versions_environment_id"), ["environment_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("environment_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_environment_versions_environment_id"))
    op.drop_table("environment_versions")
    with op.batch_alter_table("environments", schema=None) as batch_op:
        batch_op.drop_column("updated_at")
        batch_op.drop_column("tags")
        batch_op.drop_column("description")
        batch_op.drop_column("visibility")
        batch_op.drop_column("kind")
