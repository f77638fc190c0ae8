"""The relational store on SQLite and on PostgreSQL: migrations, the catalog, runs and the ledger."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from counting.catalog import CatalogRow
from tests.postgres import fresh_database
from warehouse.errors import StoreError, StoreUnavailable
from warehouse.migrate import current_revision, head_revision, migrate
from warehouse.store import (
    PayoutRow,
    RunRecord,
    Store,
    ValidatedFile,
    catalog,
    get_run,
    latest_payout,
    ledger_rows,
    open_store,
    payout_summaries,
    record_run,
    record_validated,
    upsert_catalog,
    validated_files,
    write_ledger,
)
from warehouse.tables import files_digest, ids_digest, metadata

DAY = date(2026, 11, 20)
STARTED = datetime(2026, 11, 21, 1, 2, 3, tzinfo=UTC)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the session (dropped at the end), as a SQLAlchemy URL."""
    with fresh_database("tally_test") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty store: a SQLite file, or the session's PostgreSQL database emptied."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tally.db'}"
        migrate(url)
        yield url
        return
    url = request.getfixturevalue("postgres_url")
    migrate(url)
    yield url
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())
    engine.dispose()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


def _run(run_id: str = "run-1", cutoff: int = 1_795_000_000_000) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        cutoff=cutoff,
        rules_version="2026.11.1",
        started_at=STARTED,
        finished_at=STARTED.replace(minute=5),
        status="succeeded",
        events_read=1_234,
        input_files={"ingest_date=2026-11-20/ingest_hour=22/events-0-00000.parquet": "ab" * 32},
    )


def _payout(creator_id: str, views: int, run_id: str = "run-1", day: date = DAY) -> PayoutRow:
    rate = Decimal("2.50")
    return PayoutRow(
        creator_id=creator_id,
        day=day,
        run_id=run_id,
        rules_version="2026.11.1",
        monetizable_views=views,
        rate_per_1000=rate,
        currency="USD",
        amount=(views * rate / 1000).quantize(Decimal("0.000001")),
        input_files={"ingest_date=2026-11-20/ingest_hour=22/events-0-00000.parquet": "cd" * 32},
        counted_ids_digest=ids_digest(f"e{i}" for i in range(views)),
    )


def _figures(rows: Sequence[PayoutRow]) -> list[tuple[str, date, str, int, Decimal]]:
    return [(r.creator_id, r.day, r.run_id, r.monetizable_views, r.amount) for r in rows]


def test_migrations_build_exactly_the_metadata(store: Store, store_url: str) -> None:
    assert current_revision(store) == head_revision() == "0005"
    assert migrate(store_url) == "0005"  # again: nothing to do
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []


def test_catalog_is_inserted_then_updated(store: Store) -> None:
    rows = [CatalogRow("v1", "c1", 240.5, True), CatalogRow("v2", "c1", 30.0, False)]
    assert upsert_catalog(store, rows) == 2
    upsert_catalog(
        store, [CatalogRow("v2", "c2", 31.0, True), CatalogRow("v3", "c'; drop table videos; --", 9.5, False)]
    )

    assert catalog(store) == {
        "v1": CatalogRow("v1", "c1", 240.5, True),
        "v2": CatalogRow("v2", "c2", 31.0, True),
        "v3": CatalogRow("v3", "c'; drop table videos; --", 9.5, False),
    }


def test_a_run_reads_back_as_recorded(store: Store) -> None:
    record_run(store, replace(_run(), status="running", finished_at=None, events_read=None))
    record_run(store, _run())

    assert get_run(store, "run-1") == _run()
    assert get_run(store, "unknown") is None
    with pytest.raises(StoreError, match="got 'done'"):
        record_run(store, replace(_run(), status="done"))


def test_ledger_rows_read_back_exactly(store: Store) -> None:
    big = replace(_payout("c1", 1), monetizable_views=10**13, amount=Decimal("25000000000.000001"))
    rows = [big, _payout("c2", 3)]

    assert write_ledger(store, _run(), rows) == 2

    back = ledger_rows(store, "c1")
    assert [r.payout() for r in back] == [big]
    assert back[0].amount == Decimal("25000000000.000001")
    assert isinstance(back[0].amount, Decimal)
    assert back[0].created_at is not None and back[0].created_at.tzinfo is not None
    assert _figures(ledger_rows(store, "c2", DAY)) == [("c2", DAY, "run-1", 3, Decimal("0.0075"))]
    assert ledger_rows(store, "c2", date(2026, 11, 21)) == []


def test_rewriting_a_run_is_idempotent_and_leaves_other_runs(store: Store) -> None:
    write_ledger(store, _run("run-1"), [_payout("c1", 10, "run-1"), _payout("c2", 5, "run-1")])
    write_ledger(store, _run("run-2", cutoff=1_795_000_100_000), [_payout("c1", 12, "run-2")])

    write_ledger(store, _run("run-1"), [_payout("c1", 10, "run-1")])
    write_ledger(store, _run("run-1"), [_payout("c1", 10, "run-1")])

    assert _figures(ledger_rows(store, "c1")) == [
        ("c1", DAY, "run-1", 10, Decimal("0.025")),
        ("c1", DAY, "run-2", 12, Decimal("0.03")),
    ]
    assert ledger_rows(store, "c2") == []
    latest = latest_payout(store, "c1", DAY)
    assert latest is not None and latest.run_id == "run-2"
    assert latest_payout(store, "c9", DAY) is None


def test_rewriting_some_days_keeps_the_others(store: Store) -> None:
    other_day = date(2026, 11, 21)
    write_ledger(store, _run(), [_payout("c1", 10), _payout("c1", 7, day=other_day)])

    write_ledger(store, _run(), [_payout("c1", 11)], days=[DAY])

    assert _figures(ledger_rows(store, "c1")) == [
        ("c1", DAY, "run-1", 11, Decimal("0.0275")),
        ("c1", other_day, "run-1", 7, Decimal("0.0175")),
    ]


def test_bad_ledger_rows_are_refused_and_change_nothing(store: Store) -> None:
    write_ledger(store, _run(), [_payout("c1", 10)])

    with pytest.raises(StoreError, match="never a float"):
        write_ledger(store, _run(), [replace(_payout("c1", 1), amount=0.0025)])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="at most 6 places"):
        write_ledger(store, _run(), [replace(_payout("c1", 1), amount=Decimal("0.0000001"))])
    with pytest.raises(StoreError, match="must belong to run 'run-1'"):
        write_ledger(store, _run(), [_payout("c1", 1, run_id="run-9")])
    with pytest.raises(StoreError, match="refused the write"):
        write_ledger(store, _run(), [_payout("c1", 1), _payout("c1", 2)])

    assert _figures(ledger_rows(store, "c1")) == [("c1", DAY, "run-1", 10, Decimal("0.025"))]


def test_an_unreachable_store_says_what_to_do() -> None:
    with pytest.raises(StoreUnavailable, match="TALLY_DATABASE_URL"):
        migrate("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")


def test_the_current_row_is_the_latest_published_runs(store: Store) -> None:
    published = datetime(2026, 11, 21, 2, tzinfo=UTC)
    # run-2 has the later cutoff, but run-1 was published after it (forced back after a bad run);
    # run-3, a backfill never published, has the latest cutoff of all.
    write_ledger(store, replace(_run("run-1"), published_at=published), [_payout("c1", 10, "run-1")])
    write_ledger(
        store,
        replace(_run("run-2", cutoff=1_795_000_100_000), published_at=published.replace(hour=1)),
        [_payout("c1", 12, "run-2"), _payout("c1", 3, "run-2", day=date(2026, 11, 21))],
    )
    write_ledger(store, _run("run-3", cutoff=1_795_000_200_000), [_payout("c1", 14, "run-3")])

    assert [r.run_id for r in ledger_rows(store, "c1", DAY)] == ["run-3", "run-2", "run-1"]
    current = latest_payout(store, "c1", DAY)
    assert current is not None and current.run_id == "run-1"
    chosen = latest_payout(store, "c1", DAY, run_id="run-3")
    assert chosen is not None and chosen.monetizable_views == 14

    summaries = payout_summaries(store, "c1")

    assert [(s.day, s.run_id, s.current) for s in summaries] == [
        (date(2026, 11, 21), "run-2", True),
        (DAY, "run-1", True),
    ]
    files = _payout("c1", 10).input_files
    assert (summaries[1].input_files_count, summaries[1].input_files_digest) == (1, files_digest(files))
    history = payout_summaries(store, "c1", since=DAY, until=DAY, history=True)
    assert [(s.run_id, s.current, s.monetizable_views) for s in history] == [
        ("run-1", True, 10),
        ("run-2", False, 12),
        ("run-3", False, 14),
    ]
    assert payout_summaries(store, "c9") == []


def test_publication_fields_survive_a_ledger_write(store: Store) -> None:
    run = replace(_run(), published_at=STARTED, allow_decrease_reason="repair: removed x", forced=True)
    record_run(store, run)
    assert get_run(store, "run-1") == run


def test_validated_files_are_recorded_and_updated(store: Store) -> None:
    first = ValidatedFile(
        "ingest_date=2026-11-20/ingest_hour=22/a.parquet", "ab" * 32, 10, 1, 2, 5, STARTED, "r1"
    )
    assert record_validated(store, [first]) == 1
    assert validated_files(store) == {first.path: first}
    again = replace(first, sha256="cd" * 32, ctime_ns=3, validated_by="r2")
    record_validated(store, [again])
    assert validated_files(store) == {first.path: again}


def test_the_migration_summarises_the_input_files_of_existing_ledger_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate(url, "0001")
    engine = sa.create_engine(url)
    files = {"ingest_date=2026-11-20/ingest_hour=22/b.parquet": "ef" * 32, "a.parquet": "01" * 32}
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "insert into batch_runs (run_id, cutoff, rules_version, started_at, status, input_files) "
                "values ('old', 1, 'v', '2026-11-20 00:00:00', 'succeeded', '{}')"
            )
        )
        connection.execute(
            sa.text(
                "insert into payout_ledger (creator_id, day, run_id, rules_version, monetizable_views, "
                "rate_per_1000, currency, amount, input_files, counted_ids_digest, created_at) values "
                "('c1', '2026-11-20', 'old', 'v', 1, '2.000000', 'USD', '0.002000', :files, 'x', "
                "'2026-11-20 00:00:00')"
            ),
            {"files": json.dumps(files)},
        )
    engine.dispose()

    assert migrate(url) == "0005"

    with open_store(url) as store:
        [summary] = payout_summaries(store, "c1")
        assert (summary.input_files_count, summary.input_files_digest) == (2, files_digest(files))
        record = get_run(store, "old")
        assert record is not None and (record.skip_validation, record.forced, record.published_at) == (
            False,
            False,
            None,
        )
