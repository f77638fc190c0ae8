"""The relational store: open it, keep the video catalog, record batch runs, write and read the
payout ledger. Every statement is parameterised; nothing here migrates the schema (see `migrate`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from warehouse import tables
from warehouse.errors import StoreError, StoreUnavailable
from warehouse.tables import AMOUNT_PLACES, batch_runs, files_digest, payout_ledger, videos

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RUN_STATUSES: tuple[str, ...] = (RUNNING, SUCCEEDED, FAILED)
MONEY_PLACE = Decimal(1).scaleb(-AMOUNT_PLACES)
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


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
    raw directory) to its sha256. `published_at`: when readers were switched to its baseline (None:
    never, e.g. a backfill behind the served cutoff); `allow_decrease_reason`: why the operator let
    its views fall below the served ones; `skip_validation`: published without the quality gates;
    `forced`: published behind the served cutoff or with no event read."""

    run_id: str
    cutoff: int
    rules_version: str
    started_at: datetime
    status: str
    finished_at: datetime | None = None
    events_read: int | None = None
    input_files: dict[str, str] | None = None
    published_at: datetime | None = None
    allow_decrease_reason: str | None = None
    skip_validation: bool = False
    forced: bool = False


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


@dataclass(frozen=True)
class PayoutSummary:
    """A ledger row for readers: its figures and audit fields, its input files summarised (how
    many, and `tables.files_digest` of the list), and whether it is the current row of its
    (creator, day): the one of the latest published run (see `ledger_rows`)."""

    creator_id: str
    day: date
    run_id: str
    rules_version: str
    monetizable_views: int
    rate_per_1000: Decimal
    currency: str
    amount: Decimal
    input_files_count: int
    input_files_digest: str
    counted_ids_digest: str
    created_at: datetime
    run_cutoff: int
    run_published_at: datetime | None
    current: bool


@dataclass(frozen=True)
class ValidatedFile:
    """A raw log file that passed the raw-log suite: its path (relative to the raw directory), its
    sha256 then, the stat fields that tell whether it was rewritten since, its rows, and when and
    by which run it was validated."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int
    rows: int
    validated_at: datetime
    validated_by: str


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


def creator_videos(store: Store, creator_id: str) -> list[str]:
    """The ids of a creator's videos in the catalog, in id order."""
    with _transaction(store) as connection:
        query = (
            sa.select(videos.c.video_id).where(videos.c.creator_id == creator_id).order_by(videos.c.video_id)
        )
        return [row.video_id for row in connection.execute(query)]


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
        "published_at": run.published_at,
        "allow_decrease_reason": run.allow_decrease_reason,
        "skip_validation": run.skip_validation,
        "forced": run.forced,
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
        published_at=_utc(row.published_at) if row.published_at is not None else None,
        allow_decrease_reason=row.allow_decrease_reason,
        skip_validation=bool(row.skip_validation),
        forced=bool(row.forced),
    )


def _run_recency(published_at: datetime | None, cutoff: int, started_at: datetime) -> tuple[Any, ...]:
    """How recent a run is for choosing the current ledger row: published runs after unpublished
    ones, by when they were published, then by cutoff and start."""
    published = _utc(published_at) if published_at is not None else _NEVER
    return (published_at is not None, published, int(cutoff), _utc(started_at))


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
        key=lambda r: (r.day, _run_recency(r.run_published_at, r.run_cutoff, r.run_started_at), r.id),
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
    with _transaction(store) as connection:
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
    with _transaction(store) as connection:
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


def _summary(row: sa.Row[Any], current: bool, files: Mapping[str, str] | None) -> PayoutSummary:
    count, digest = row.input_files_count, row.input_files_digest
    if files is not None:  # a row written before the summary columns existed
        count, digest = len(files), files_digest(files)
    return PayoutSummary(
        creator_id=row.creator_id,
        day=row.day,
        run_id=row.run_id,
        rules_version=row.rules_version,
        monetizable_views=int(row.monetizable_views),
        rate_per_1000=row.rate_per_1000,
        currency=row.currency,
        amount=row.amount,
        input_files_count=int(count or 0),
        input_files_digest=str(digest),
        counted_ids_digest=row.counted_ids_digest,
        created_at=_utc(row.created_at),
        run_cutoff=int(row.run_cutoff),
        run_published_at=_utc(row.run_published_at) if row.run_published_at is not None else None,
        current=current,
    )


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


# --- validated raw files -----------------------------------------------------------------------


def validated_files(store: Store) -> dict[str, ValidatedFile]:
    """Every raw file recorded as validated, by path."""
    with _transaction(store) as connection:
        result = connection.execute(sa.select(tables.validated_files))
        return {
            r.path: ValidatedFile(
                path=r.path,
                sha256=r.sha256,
                size=int(r.size),
                mtime_ns=int(r.mtime_ns),
                ctime_ns=int(r.ctime_ns),
                rows=int(r.rows),
                validated_at=_utc(r.validated_at),
                validated_by=r.validated_by,
            )
            for r in result
        }


def record_validated(store: Store, files: Iterable[ValidatedFile]) -> int:
    """Record (or update) raw files as validated with their checksum; returns how many."""
    records = [{f.name: getattr(record, f.name) for f in fields(ValidatedFile)} for record in files]
    with _transaction(store) as connection:
        for start in range(0, len(records), 5_000):
            _upsert(connection, tables.validated_files, records[start : start + 5_000], ("path",))
    return len(records)
