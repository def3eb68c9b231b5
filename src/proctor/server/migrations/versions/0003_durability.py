"""evaluation attempts and create keys

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:05:00

`attempts` counts the runs that worked on an evaluation (a resumed run reopens it);
`create_key` makes `POST /evaluations/` with an Idempotency-Key create at most once per user.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("create_key", sa.String(length=200), nullable=True))
        batch.create_unique_constraint("uq_evaluations_user_create_key", ["user_id", "create_key"])


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_constraint("uq_evaluations_user_create_key", type_="unique")
        batch.drop_column("create_key")
        batch.drop_column("attempts")
