"""The initial schema: the video catalog, batch runs and the payout ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from warehouse.tables import ExactDecimal

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "videos",
        sa.Column("video_id", sa.String(64), nullable=False),
        sa.Column("creator_id", sa.String(64), nullable=False),
        sa.Column("duration_secs", sa.Float(), nullable=False),
        sa.Column("monetized", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("video_id", name=op.f("pk_videos")),
    )
    op.create_index(op.f("ix_videos_creator_id"), "videos", ["creator_id"])
    op.create_table(
        "batch_runs",
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("cutoff", sa.BigInteger(), nullable=False),
        sa.Column("rules_version", sa.String(32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("events_read", sa.BigInteger(), nullable=True),
        sa.Column("input_files", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_batch_runs")),
    )
    op.create_table(
        "payout_ledger",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("creator_id", sa.String(64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("rules_version", sa.String(32), nullable=False),
        sa.Column("monetizable_views", sa.BigInteger(), nullable=False),
        sa.Column("rate_per_1000", ExactDecimal(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("amount", ExactDecimal(), nullable=False),
        sa.Column("input_files", sa.JSON(), nullable=False),
        sa.Column("counted_ids_digest", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["batch_runs.run_id"], name=op.f("fk_payout_ledger_run_id_batch_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payout_ledger")),
        sa.UniqueConstraint(
            "creator_id", "day", "run_id", name=op.f("uq_payout_ledger_creator_id_day_run_id")
        ),
    )
    op.create_index(op.f("ix_payout_ledger_run_id"), "payout_ledger", ["run_id"])
    op.create_index("ix_payout_ledger_creator_day", "payout_ledger", ["creator_id", "day"])


def downgrade() -> None:
    op.drop_index("ix_payout_ledger_creator_day", table_name="payout_ledger")
    op.drop_index(op.f("ix_payout_ledger_run_id"), table_name="payout_ledger")
    op.drop_table("payout_ledger")
    op.drop_table("batch_runs")
    op.drop_index(op.f("ix_videos_creator_id"), table_name="videos")
    op.drop_table("videos")
