"""the shards of a sharded hosted evaluation

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 04:20:00

`hosted_shards` holds one row per shard of a hosted evaluation run with `eval_config.shards`
N > 1: its sandbox handle, log, attempts and exit, so the launcher (or the one that adopts
its work) retries, stops and reports each shard.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hosted_shards",
        sa.Column("evaluation_id", sa.String(length=64), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("sandbox_handle", sa.String(length=200), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["hosted_evaluations.evaluation_id"],
            name=op.f("fk_hosted_shards_evaluation_id_hosted_evaluations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("evaluation_id", "shard", name=op.f("pk_hosted_shards")),
    )


def downgrade() -> None:
    op.drop_table("hosted_shards")
