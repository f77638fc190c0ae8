"""Milestones: each (video, step) a published baseline reached, and its announcements' state.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "milestones",
        sa.Column("video_id", sa.String(64), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("views", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("cutoff", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("announced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_state", sa.String(16), nullable=False),
        sa.Column("webhook_attempts", sa.Integer(), nullable=False),
        sa.Column("webhook_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_error", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("video_id", "step", name=op.f("pk_milestones")),
    )


def downgrade() -> None:
    op.drop_table("milestones")
