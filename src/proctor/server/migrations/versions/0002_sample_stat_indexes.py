"""indexes for the dashboard's per-evaluation sample statistics

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 00:55:00

The dashboard reads one evaluation's reward histogram, per-example pass@k and errored count
and sorts its samples by reward (ties by id, so without a sort step). Without these, each
is a scan of the evaluation's sample rows (data included); with them, index range scans.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_samples_evaluation_example",
        "samples",
        ["evaluation_id", "example_id", "reward", "has_error"],
        unique=False,
    )
    op.create_index(
        "ix_samples_evaluation_reward", "samples", ["evaluation_id", "reward", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_samples_evaluation_reward", table_name="samples")
    op.drop_index("ix_samples_evaluation_example", table_name="samples")
