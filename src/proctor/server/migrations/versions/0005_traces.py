"""the traces service: committed uploads and their records

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00

`trace_uploads` holds one row per committed `POST /traces` (its content digest makes a
replay answer the same receipt); `trace_records` one row per episode, bare trace or an
episode's member trace, against the evaluation its `run.id` names.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "trace_uploads",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("line_format", sa.String(length=16), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_trace_uploads_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trace_uploads")),
        sa.UniqueConstraint("user_id", "digest", name="uq_trace_uploads_user_digest"),
    )
    op.create_table(
        "trace_records",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("evaluation_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("record_id", sa.String(length=200), nullable=False),
        sa.Column("episode_id", sa.String(length=200), nullable=True),
        sa.Column("upload_digest", sa.String(length=64), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_trace_records_evaluation_id_evaluations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trace_records")),
        sa.UniqueConstraint(
            "evaluation_id", "kind", "record_id", name="uq_trace_records_evaluation_kind_record"
        ),
    )
    with op.batch_alter_table("trace_records", schema=None) as batch_op:
        batch_op.create_index("ix_trace_records_record", ["record_id"], unique=False)
        batch_op.create_index(
            "ix_trace_records_evaluation_episode", ["evaluation_id", "episode_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("trace_records", schema=None) as batch_op:
        batch_op.drop_index("ix_trace_records_evaluation_episode")
        batch_op.drop_index("ix_trace_records_record")
    op.drop_table("trace_records")
    op.drop_table("trace_uploads")
