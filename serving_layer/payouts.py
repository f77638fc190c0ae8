"""Creator payouts as the ledger holds them, with their audit fields, for the read API."""

from __future__ import annotations

from datetime import date
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from serving_layer.errors import StoreUnavailable
from warehouse.errors import StoreError
from warehouse.store import ledger_rows, open_store


def creator_payouts(
    store_url: str, creator_id: str, since: date | None, until: date | None
) -> list[dict[str, Any]]:
    """Every ledger row of a creator in [since, until], newest day first; money as decimal strings."""
    try:
        with open_store(store_url) as store:
            if not sa.inspect(store.engine).has_table("payout_ledger"):
                return []  # no batch has written payouts into this store yet
            rows = ledger_rows(store, creator_id)
    except (SQLAlchemyError, StoreError) as exc:
        raise StoreUnavailable(
            f"the relational store is not readable ({exc}): run 'tally catalog load' or a batch with "
            "payouts to create it, or set TALLY_DATABASE_URL"
        ) from exc
    chosen = [r for r in rows if (since is None or r.day >= since) and (until is None or r.day <= until)]
    chosen.sort(key=lambda r: (r.day, r.run_id), reverse=True)
    return [
        {
            "creator_id": r.creator_id,
            "day": r.day.isoformat(),
            "run_id": r.run_id,
            "rules_version": r.rules_version,
            "monetizable_views": r.monetizable_views,
            "rate_per_1000": str(r.rate_per_1000),
            "currency": r.currency,
            "amount": str(r.amount),
            "input_files": r.input_files,
            "counted_ids_digest": r.counted_ids_digest,
        }
        for r in chosen
    ]
