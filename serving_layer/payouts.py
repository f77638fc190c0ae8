"""Creator payouts as the ledger holds them, with their audit fields, for the read API: the current
row of each day (the latest published run's), or every run's rows marked current or not."""

from __future__ import annotations

from datetime import date
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from serving_layer.errors import StoreUnavailable, UnknownCreator
from warehouse.catalog import creator_videos
from warehouse.connection import open_store
from warehouse.errors import StoreError
from warehouse.ledger import PayoutSummary, payout_summaries


def creator_payouts(
    store_url: str, creator_id: str, since: date | None, until: date | None, history: bool = False
) -> list[dict[str, Any]]:
    """A creator's ledger rows in [since, until], newest day first, money as decimal strings: one
    per day (the current row), or with `history` every run's row, the current one first. The input
    files are summarised (how many, one digest over the list); `tally audit payout --files` lists
    them. A creator of the catalog without payouts yet has none; one with no video in the catalog
    and no row in the range raises `UnknownCreator` (the creator's stats refuse it likewise)."""
    try:
        with open_store(store_url) as store:
            tables = sa.inspect(store.engine)
            rows: list[PayoutSummary] = []  # none before a batch wrote payouts into this store
            if tables.has_table("payout_ledger"):
                rows = payout_summaries(store, creator_id, since, until, history)
            if not rows and not (tables.has_table("videos") and creator_videos(store, creator_id)):
                raise UnknownCreator(creator_id)
    except (SQLAlchemyError, StoreError) as exc:
        raise StoreUnavailable(
            f"the relational store is not readable ({exc}): run 'tally catalog load' or a batch with "
            "payouts to create it, or set TALLY_DATABASE_URL"
        ) from exc
    return [_answer(row) for row in rows]


def _answer(row: PayoutSummary) -> dict[str, Any]:
    return {
        "creator_id": row.creator_id,
        "day": row.day.isoformat(),
        "current": row.current,
        "run_id": row.run_id,
        "run_cutoff": row.run_cutoff,
        "run_published_at": row.run_published_at.isoformat() if row.run_published_at else None,
        "rules_version": row.rules_version,
        "monetizable_views": row.monetizable_views,
        "rate_per_1000": str(row.rate_per_1000),
        "currency": row.currency,
        "amount": str(row.amount),
        "input_files": {"count": row.input_files_count, "digest": row.input_files_digest},
        "counted_ids_digest": row.counted_ids_digest,
    }
