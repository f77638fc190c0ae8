"""The relational store: open it, keep the video catalog, record batch runs, write and read the
payout ledger, record validated and quarantined raw files. Every statement is parameterised;
nothing here migrates the schema (see `migrate`). One module per part: `connection`, `catalog`,
`runs`, `ledger`, `validated`, `compacted`, `quarantine`; their public names stay importable from here, where
the other layers import them."""

from __future__ import annotations

from warehouse.catalog import catalog, creator_videos, upsert_catalog
from warehouse.compacted import CompactedFile, compacted_files, record_compaction
from warehouse.connection import Store, open_store
from warehouse.ledger import (
    MONEY_PLACE,
    LedgerRow,
    PayoutRow,
    PayoutSummary,
    latest_payout,
    ledger_rows,
    payout_summaries,
    write_ledger,
)
from warehouse.quarantine import QuarantinedFile, quarantined_files, record_quarantine
from warehouse.runs import FAILED, RUN_STATUSES, RUNNING, SUCCEEDED, RunRecord, get_run, record_run
from warehouse.validated import ValidatedFile, record_validated, validated_files

__all__ = [
    "FAILED",
    "MONEY_PLACE",
    "RUNNING",
    "RUN_STATUSES",
    "SUCCEEDED",
    "CompactedFile",
    "LedgerRow",
    "PayoutRow",
    "PayoutSummary",
    "QuarantinedFile",
    "RunRecord",
    "Store",
    "ValidatedFile",
    "catalog",
    "compacted_files",
    "creator_videos",
    "get_run",
    "latest_payout",
    "ledger_rows",
    "open_store",
    "payout_summaries",
    "quarantined_files",
    "record_compaction",
    "record_quarantine",
    "record_run",
    "record_validated",
    "upsert_catalog",
    "validated_files",
    "write_ledger",
]
