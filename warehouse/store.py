"""The relational store: open it, keep the video catalog, record batch runs, write and read the
payout ledger. Every statement is parameterised; nothing here migrates the schema (see `migrate`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from counting.catalog import CatalogRow
from warehouse.errors import StoreError, StoreUnavailable
from warehouse.tables import AMOUNT_PLACES, batch_runs, payout_ledger, videos

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RUN_STATUSES: tuple[str, ...] = (RUNNING, SUCCEEDED, FAILED)
MONEY_PLACE = Decimal(1).scaleb(-AMOUNT_PLACES)


@dataclass(frozen=True)
class Store:
    """An open relational store: its engine (a connection pool) and the URL it was opened with."""

    engine: Engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RunRecord:
    """One batch run as the store keeps it. `input_files` maps each raw file read (relative to the
    raw directory) to its sha256."""

    run_id: str
    cutoff: int
    rules_version: str
    started_at: datetime
    status: str
    finished_at: datetime | None = None
    events_read: int | None = None
    input_files: dict[str, str] | None = None


@dataclass(frozen=True)
class PayoutRow:
    """One creator's payout for one UTC day of event time, as one run computed it.

    `input_files` maps each raw Parquet file that held a view of that day (path relative to the
    raw directory) to its sha256; `counted_ids_digest` is `tables.ids_digest` of the counted ids.
    """

    creator_id: str
    day: date
    run_id: str
    rules_version: str
    monetizable_views: int
    rate_per_1000: Decimal
    currency: str
    amount: Decimal
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


def open_store(url: str, echo: bool = False) -> Store:
    """Open the store at a SQLAlchemy URL (`sqlite:///...`, `postgresql+psycopg://...`)."""
    try:
        engine = sa.create_engine(url, echo=echo, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"cannot open the relational store at {_safe(url)}: {exc}") from exc
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        database = engine.url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)  # the data directory may be new
    return Store(engine)


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _safe(url: str) -> str:
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable URL>"


@contextmanager
def _transaction(store: Store) -> Iterator[Connection]:
    try:
        with store.engine.begin() as connection:
            yield connection
    except sa.exc.IntegrityError as exc:
        raise StoreError(f"the relational store refused the write: {exc.orig}") from exc
    except sa.exc.OperationalError as exc:
        url = store.engine.url.render_as_string(hide_password=True)
        raise StoreUnavailable(
            f"the relational store at {url} failed ({exc.orig}): check that the database is up and "
            "migrated ('tally' migrates it before use), or set TALLY_DATABASE_URL"
        ) from exc


def _upsert(connection: Connection, table: sa.Table, rows: list[dict[str, Any]], key: Sequence[str]) -> None:
    """Insert rows, updating every non-key column of rows whose key exists (SQLite, PostgreSQL)."""
    if not rows:
        return
    name = connection.dialect.name
    if name == "postgresql":
        pg = postgresql.insert(table)
        pg_updates = {c.name: pg.excluded[c.name] for c in table.columns if c.name not in key}
        connection.execute(pg.on_conflict_do_update(index_elements=list(key), set_=pg_updates), rows)
    elif name == "sqlite":
        lite = sqlite.insert(table)
        lite_updates = {c.name: lite.excluded[c.name] for c in table.columns if c.name not in key}
        connection.execute(lite.on_conflict_do_update(index_elements=list(key), set_=lite_updates), rows)
    else:
        raise StoreError(f"the relational store supports SQLite and PostgreSQL (got {name!r})")


# --- the video catalog -------------------------------------------------------------------------


def upsert_catalog(store: Store, rows: Iterable[CatalogRow]) -> int:
    """Insert or update videos (creator, duration, monetized); returns how many rows were given."""
    records = [row._asdict() for row in rows]
    with _transaction(store) as connection:
        for start in range(0, len(records), 5_000):
            _upsert(connection, videos, records[start : start + 5_000], ("video_id",))
    return len(records)


def catalog(store: Store) -> dict[str, CatalogRow]:
    """Every video of the catalog by id."""
    with _transaction(store) as connection:
        result = connection.execute(sa.select(videos).order_by(videos.c.video_id))
        return {
            r.video_id: CatalogRow(r.video_id, r.creator_id, float(r.duration_secs), bool(r.monetized))
            for r in result
        }


# --- batch runs --------------------------------------------------------------------------------


def record_run(store: Store, run: RunRecord) -> None:
    """Insert or update the record of a batch run (keyed by run id)."""
    if run.status not in RUN_STATUSES:
        raise StoreError(f"run status must be one of {RUN_STATUSES} (got {run.status!r})")
    with _transaction(store) as connection:
        _upsert(connection, batch_runs, [_run_values(run)], ("run_id",))


def _run_values(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "cutoff": run.cutoff,
        "rules_version": run.rules_version,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "events_read": run.events_read,
        "input_files": dict(sorted((run.input_files or {}).items())),
    }


def get_run(store: Store, run_id: str) -> RunRecord | None:
    with _transaction(store) as connection:
        row = connection.execute(sa.select(batch_runs).where(batch_runs.c.run_id == run_id)).first()
    if row is None:
        return None
    return RunRecord(
        run_id=row.run_id,
        cutoff=int(row.cutoff),
        rules_version=row.rules_version,
        started_at=_utc(row.started_at),
        finished_at=_utc(row.finished_at) if row.finished_at is not None else None,
        status=row.status,
        events_read=row.events_read,
        input_files=dict(row.input_files or {}),
    )


def _utc(moment: datetime) -> datetime:
    """Datetimes come back naive from SQLite; the store only ever writes UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# --- the payout ledger -------------------------------------------------------------------------


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
    with _transaction(store) as connection:
        _upsert(connection, batch_runs, [_run_values(run)], ("run_id",))
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
        "counted_ids_digest": row.counted_ids_digest,
        "created_at": created_at,
    }


def ledger_rows(store: Store, creator_id: str, day: date | None = None) -> list[LedgerRow]:
    """A creator's ledger rows (of one day if given), by day, then by run: oldest cutoff first."""
    query = (
        sa.select(payout_ledger)
        .join(batch_runs, batch_runs.c.run_id == payout_ledger.c.run_id)
        .where(payout_ledger.c.creator_id == creator_id)
        .order_by(payout_ledger.c.day, batch_runs.c.cutoff, batch_runs.c.started_at, payout_ledger.c.id)
    )
    if day is not None:
        query = query.where(payout_ledger.c.day == day)
    with _transaction(store) as connection:
        return [_ledger_row(r) for r in connection.execute(query)]


def latest_payout(store: Store, creator_id: str, day: date) -> LedgerRow | None:
    """The creator's payout of `day` as the latest run (highest cutoff, then latest start) has it."""
    rows = ledger_rows(store, creator_id, day)
    return rows[-1] if rows else None


def _ledger_row(row: sa.Row[Any]) -> LedgerRow:
    return LedgerRow(
        id=int(row.id),
        creator_id=row.creator_id,
        day=row.day,
        run_id=row.run_id,
        rules_version=row.rules_version,
        monetizable_views=int(row.monetizable_views),
        rate_per_1000=row.rate_per_1000,
        currency=row.currency,
        amount=row.amount,
        input_files=dict(row.input_files),
        counted_ids_digest=row.counted_ids_digest,
        created_at=_utc(row.created_at),
    )
