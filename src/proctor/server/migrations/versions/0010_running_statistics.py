"""running statistics

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 04:30:00

`example_tallies` (per example), `shape_tallies` (scored examples grouped by shape) and
`evaluations.tallies` (JSON) hold the sums every figure of an evaluation needs, updated with
each stored batch (`proctor.server.evaluations.tallies`), so a live page's poll reads a few
rows instead of every sample. The upgrade builds them for every evaluation stored before, by
the same fold the ingest runs (one pass over each evaluation's samples).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy: on SQLite a batch drops and recreates the table,
    # and with foreign keys on, dropping `evaluations` would delete its samples.
    op.add_column("evaluations", sa.Column("tallies", sa.Text(), nullable=True))
    op.create_table(
        "example_tallies",
        sa.Column("evaluation_id", sa.String(length=64), nullable=False),
        sa.Column("example_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("scored", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_example_tallies_evaluation_id_evaluations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("evaluation_id", "example_id", name=op.f("pk_example_tallies")),
    )
    op.create_table(
        "shape_tallies",
        sa.Column("evaluation_id", sa.String(length=64), nullable=False),
        sa.Column("scored", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("passed", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("mean_bin", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("examples", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.Column("cluster_sq", sa.Float(), nullable=False),
        sa.Column("mean_sum", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluations.id"],
            name=op.f("fk_shape_tallies_evaluation_id_evaluations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "evaluation_id", "scored", "passed", "mean_bin", name=op.f("pk_shape_tallies")
        ),
    )
    _backfill(op.get_bind())


def _backfill(connection: sa.Connection) -> None:
    # The ingest's own fold, so a backfilled evaluation holds exactly what it would have
    # held had its samples arrived after this revision.
    from proctor.server.evaluations import tallies

    evaluations = sa.table(
        "evaluations", sa.column("id"), sa.column("metadata_raw"), sa.column("tallies")
    )
    for evaluation_id, metadata_raw in connection.execute(
        sa.select(evaluations.c.id, evaluations.c.metadata_raw)
    ).all():
        built = tallies.rebuild(connection, evaluation_id, tallies.default_mark(metadata_raw))
        connection.execute(
            sa.update(evaluations)
            .where(evaluations.c.id == evaluation_id)
            .values(tallies=built.to_json())
        )


def downgrade() -> None:
    op.drop_table("shape_tallies")
    op.drop_table("example_tallies")
    op.drop_column("evaluations", "tallies")
