"""Validated inputs and published runs: the raw files that passed validation, when a run was
published and how (a reason to let views fall, validation skipped, forced), and a summary of each
ledger row's input files.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from warehouse.tables import files_digest

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTER TABLE ADD COLUMN (no batch copy: on SQLite that would drop and recreate
    # batch_runs, which the ledger's foreign key refuses once it holds rows).
    op.add_column("batch_runs", sa.Column("published_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("batch_runs", sa.Column("allow_decrease_reason", sa.Text(), nullable=True))
    op.add_column(
        "batch_runs", sa.Column("skip_validation", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("batch_runs", sa.Column("forced", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("payout_ledger", sa.Column("input_files_count", sa.Integer(), nullable=True))
    op.add_column("payout_ledger", sa.Column("input_files_digest", sa.String(64), nullable=True))
    op.create_table(
        "validated_files",
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("ctime_ns", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("validated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("validated_by", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_validated_files")),
    )
    _summarise_ledger_inputs()


def _summarise_ledger_inputs() -> None:
    """Fill the input-file summary of the ledger rows written before this revision."""
    ledger = sa.table(
        "payout_ledger",
        sa.column("id", sa.BigInteger()),
        sa.column("input_files", sa.JSON()),
        sa.column("input_files_count", sa.Integer()),
        sa.column("input_files_digest", sa.String(64)),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(ledger.c.id, ledger.c.input_files)).all()
    for row_id, files in rows:
        listed = dict(files or {})
        connection.execute(
            sa.update(ledger)
            .where(ledger.c.id == row_id)
            .values(input_files_count=len(listed), input_files_digest=files_digest(listed))
        )


def downgrade() -> None:
    op.drop_table("validated_files")
    for table, column in (
        ("payout_ledger", "input_files_digest"),
        ("payout_ledger", "input_files_count"),
        ("batch_runs", "forced"),
        ("batch_runs", "skip_validation"),
        ("batch_runs", "allow_decrease_reason"),
        ("batch_runs", "published_at"),
    ):
        op.drop_column(table, column)  # SQLite >= 3.35 drops a column in place
