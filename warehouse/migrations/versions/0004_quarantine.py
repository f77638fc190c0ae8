"""Quarantine and corrections: raw files taken out of the log after failing its gate, the files each
run left out, and the views each run took back from the served baseline.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batch_runs", sa.Column("excluded_files", sa.JSON(), nullable=True))
    op.add_column("batch_runs", sa.Column("corrections", sa.JSON(), nullable=True))
    op.create_table(
        "quarantined_files",
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("release_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_quarantined_files")),
    )


def downgrade() -> None:
    op.drop_table("quarantined_files")
    op.drop_column("batch_runs", "corrections")
    op.drop_column("batch_runs", "excluded_files")
