"""The payout ledger in the store: each creator's payout per day and run, written per run and read
back with the current row of each day (the latest published run's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from warehouse.connection import Store, as_utc, transaction, upsert
from warehouse.errors import StoreError
from warehouse.runs import RunRecord, run_recency, run_values
from warehouse.tables import AMOUNT_PLACES, batch_runs, files_digest, payout_ledger

MONEY_PLACE = Decimal(1).scaleb(-AMOUNT_PLACES)


@dataclass(frozen=True)
class PayoutFigures:
    """What a payout is: a creator, a UTC day of event time, the run and rules that counted it, its
    monetizable views and what they earn."""

    creator_id: str
    day: date
    run_id: str
    rules_version: str
    monetizable_views: int
    rate_per_1000: Decimal
    currency: str
    amount: Decimal


@dataclass(frozen=True)
class PayoutRow(PayoutFigures):
    """One creator's payout for one UTC day of event time, as one run computed it.

    `input_files` maps each raw Parquet file that held a view of that day (path relative to the
    raw directory) to its sha256; `counted_ids_digest` is `tables.ids_digest` of the counted ids.
    """

    input_files: dict[str, str]
    counted_ids_digest: str


@dataclass(frozen=True)
class LedgerRow(PayoutRow):
    """A payout row as read back from the ledger, with its row id and when it was written."""

    id: int = 0
    created_at: datetime | None = None

    def payout(self) -> PayoutRow:
        """The row's payout fields alone (comparable to a computed PayoutRow)."""
        return PayoutRow(**{f.name: getattr(self, f.name) for f in fields(PayoutRow)})


@dataclass(frozen=True)
class PayoutSummary(PayoutFigures):
    """A ledger row for readers: its figures and audit fields, its input files summarised (how
    many, and `tables.files_digest` of the list), and whether it is the current row of its
    (creator, day): the one of the latest published run (see `ledger_rows`)."""

    input_files_count: int
    input_files_digest: str
    counted_ids_digest: str
    created_at: datetime
    run_cutoff: int
    run_published_at: datetime | None
    current: bool


def write_ledger(
    store: Store, run: RunRecord, rows: Sequence[PayoutRow], days: Iterable[date] | None = None
) -> int:
    """Record the run and replace its ledger rows by `rows`, in one transaction: every row of the
    run, or only those of `days` if given. Writing a run's payouts again leaves the ledger as one
    write does; rows of other runs are never touched. Returns the number of rows written."""
    wrong = [r for r in rows if r.run_id != run.run_id]
    if wrong:
        raise StoreError(f"ledger rows must belong to run {run.run_id!r} (got run {wrong[0].run_id!r})")
    if days is not None and not {r.day for r in rows} <= set(days):
        raise StoreError(f"ledger rows of days outside {sorted(set(days))} given to write_ledger")
    values = [_ledger_values(r, datetime.now(UTC)) for r in rows]
    with transaction(store) as connection:
        upsert(connection, batch_runs, [run_values(run)], ("run_id",))
        stale = sa.delete(payout_ledger).where(payout_ledger.c.run_id == run.run_id)
        if days is not None:
            stale = stale.where(payout_ledger.c.day.in_(sorted(set(days))))
        connection.execute(stale)
        if values:
            connection.execute(sa.insert(payout_ledger), values)
    return len(values)


def _ledger_values(row: PayoutRow, created_at: datetime) -> dict[str, Any]:
    for name in ("amount", "rate_per_1000"):
        value = getattr(row, name)
        if not isinstance(value, Decimal):
            raise StoreError(f"{name} must be a Decimal, never a float (got {value!r})")
        if not value.is_finite() or value != value.quantize(MONEY_PLACE):
            raise StoreError(f"{name} must be a finite decimal of at most 6 places (got {value!r})")
    return {
        "creator_id": row.creator_id,
        "day": row.day,
        "run_id": row.run_id,
        "rules_version": row.rules_version,
        "monetizable_views": row.monetizable_views,
        "rate_per_1000": row.rate_per_1000,
        "currency": row.currency,
        "amount": row.amount,
        "input_files": dict(sorted(row.input_files.items())),
        "input_files_count": len(row.input_files),
        "input_files_digest": files_digest(row.input_files),
        "counted_ids_digest": row.counted_ids_digest,
        "created_at": created_at,
    }


_RUN_COLUMNS = (
    batch_runs.c.published_at.label("run_published_at"),
    batch_runs.c.cutoff.label("run_cutoff"),
    batch_runs.c.started_at.label("run_started_at"),
)


def _by_recency(rows: Iterable[sa.Row[Any]]) -> list[sa.Row[Any]]:
    """Ledger rows joined with their run, by day, then by run recency (`_run_recency`, the
    current row of each day last), then by row id."""
    return sorted(
        rows,
        key=lambda r: (r.day, run_recency(r.run_published_at, r.run_cutoff, r.run_started_at), r.id),
    )


def ledger_rows(store: Store, creator_id: str, day: date | None = None) -> list[LedgerRow]:
    """A creator's ledger rows (of one day if given), by day, then by run, the current row of each
    day last: the row of the run published most recently; runs never published (a backfill behind
    the served cutoff) come before every published one, by cutoff, then start."""
    query = (
        sa.select(payout_ledger, *_RUN_COLUMNS)
        .join(batch_runs, batch_runs.c.run_id == payout_ledger.c.run_id)
        .where(payout_ledger.c.creator_id == creator_id)
    )
    if day is not None:
        query = query.where(payout_ledger.c.day == day)
    with transaction(store) as connection:
        return [_ledger_row(r) for r in _by_recency(connection.execute(query))]


def latest_payout(store: Store, creator_id: str, day: date, run_id: str | None = None) -> LedgerRow | None:
    """The creator's current payout of `day` (the latest published run's row, see `ledger_rows`),
    or the row of run `run_id` if given."""
    rows = ledger_rows(store, creator_id, day)
    if run_id is not None:
        rows = [r for r in rows if r.run_id == run_id]
    return rows[-1] if rows else None


def payout_summaries(
    store: Store,
    creator_id: str,
    since: date | None = None,
    until: date | None = None,
    history: bool = False,
) -> list[PayoutSummary]:
    """A creator's ledger rows in [since, until], newest day first, each marked current or not:
    the current row of each day only, or with `history` every run's row, the current one first.
    The input file lists are not read, only their summary."""
    wanted = [c for c in payout_ledger.columns if c.name != "input_files"]
    query = (
        sa.select(*wanted, *_RUN_COLUMNS)
        .join(batch_runs, batch_runs.c.run_id == payout_ledger.c.run_id)
        .where(payout_ledger.c.creator_id == creator_id)
    )
    if since is not None:
        query = query.where(payout_ledger.c.day >= since)
    if until is not None:
        query = query.where(payout_ledger.c.day <= until)
    with transaction(store) as connection:
        ordered = _by_recency(connection.execute(query))
        unsummarised = [r.id for r in ordered if r.input_files_digest is None]
        lists = _input_files(connection, unsummarised) if unsummarised else {}
    current = {r.day: r.id for r in ordered}  # the last of each day
    answer = []
    for row in reversed(ordered):
        is_current = current[row.day] == row.id
        if history or is_current:
            answer.append(_summary(row, is_current, lists.get(int(row.id))))
    return answer


def _input_files(connection: Connection, ids: list[int]) -> dict[int, dict[str, str]]:
    query = sa.select(payout_ledger.c.id, payout_ledger.c.input_files).where(payout_ledger.c.id.in_(ids))
    return {int(i): dict(files or {}) for i, files in connection.execute(query)}


def _figures(row: sa.Row[Any]) -> dict[str, Any]:
    """The `PayoutFigures` fields of a ledger row."""
    figures = {f.name: getattr(row, f.name) for f in fields(PayoutFigures)}
    figures["monetizable_views"] = int(row.monetizable_views)
    return figures


def _summary(row: sa.Row[Any], current: bool, files: Mapping[str, str] | None) -> PayoutSummary:
    count, digest = row.input_files_count, row.input_files_digest
    if files is not None:  # a row written before the summary columns existed
        count, digest = len(files), files_digest(files)
    return PayoutSummary(
        **_figures(row),
        input_files_count=int(count or 0),
        input_files_digest=str(digest),
        counted_ids_digest=row.counted_ids_digest,
        created_at=as_utc(row.created_at),
        run_cutoff=int(row.run_cutoff),
        run_published_at=as_utc(row.run_published_at) if row.run_published_at is not None else None,
        current=current,
    )


def _ledger_row(row: sa.Row[Any]) -> LedgerRow:
    return LedgerRow(
        id=int(row.id),
        **_figures(row),
        input_files=dict(row.input_files),
        counted_ids_digest=row.counted_ids_digest,
        created_at=as_utc(row.created_at),
    )
