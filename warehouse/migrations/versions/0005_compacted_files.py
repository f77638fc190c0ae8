"""Compacted raw files: the validated log files merged into one file an hour and partition, and
where their rows are now.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compacted_files",
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("into_path", sa.String(1024), nullable=False),
        sa.Column("into_sha256", sa.String(64), nullable=False),
        sa.Column("compacted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_compacted_files")),
    )


def downgrade() -> None:
    op.drop_table("compacted_files")
