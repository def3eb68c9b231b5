"""evaluation attempts and create keys; the traces service's tables

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:05:00

`attempts` counts the runs that worked on an evaluation (a resumed run reopens it);
`create_key` makes `POST /evaluations/` with an Idempotency-Key create at most once per user.
`trace_uploads` / `trace_records` hold what `POST /traces` received.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("create_key", sa.String(length=200), nullable=True))
        batch.create_unique_constraint("uq_evaluations_user_create_key", ["user_id", "create_key"])
    op.create_table(
        "trace_uploads",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_trace_uploads_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trace_uploads")),
        sa.UniqueConstraint("user_id", "digest", name="uq_trace_uploads_user_digest"),
    )
    op.create_table(
        "trace_records",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("evaluation_id", sa.String(length=64), nullable=False),
        sa.Column("upload_id", _BIG_ID, nullable=False),
        sa.Column("episode_id", sa.String(length=200), nullable=True),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_trace_records_evaluation_id_evaluations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["upload_id"],
            ["trace_uploads.id"],
            name=op.f("fk_trace_records_upload_id_trace_uploads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trace_records")),
    )
    op.create_index(
        "ix_trace_records_evaluation_episode",
        "trace_records",
        ["evaluation_id", "episode_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_trace_records_evaluation_episode", table_name="trace_records")
    op.drop_table("trace_records")
    op.drop_table("trace_uploads")
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_constraint("uq_evaluations_user_create_key", type_="unique")
        batch.drop_column("create_key")
        batch.drop_column("attempts")
