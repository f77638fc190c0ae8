"""`audit_payout`: the ledger re-derives from the raw log; tampering with one raw file is reported,
naming the file, the figures and the event ids."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from batch_layer.audit import audit_payout
from batch_layer.payouts import run_payouts
from counting.batchpaths import payout_events_path
from counting.event import Event
from counting.settings import Settings
from counting.traffic import catalog_rows
from tests.batch_layer.test_batch_payouts import (
    CUTOFF,
    TRAFFIC,
    oracle_views,
    payout_settings,
    traffic_events,
)
from tests.logfiles import write_log  # module scope: the write_log fixture is per test
from warehouse.errors import PayoutNotFound
from warehouse.store import LedgerRow, compacted_files, latest_payout, ledger_rows, open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def paid(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> tuple[Settings, list[Event]]:
    """One payout run over generated traffic with bots: its settings (log, store) and its events."""
    settings = payout_settings(tmp_path_factory.mktemp("audit"))
    events = traffic_events(TRAFFIC)
    write_log(settings.raw_dir, events)
    run_payouts(settings, "run-1", CUTOFF, spark=spark)
    return settings, events


def _ledger(settings: Settings) -> list[LedgerRow]:
    creators = sorted({row.creator_id for row in catalog_rows(TRAFFIC)})
    with open_store(settings.store_url) as store:
        return [row for creator in creators for row in ledger_rows(store, creator)]


def _copy_of(source: Settings, tmp_path: Path) -> Settings:
    """The paid run's data directory copied for one test to change."""
    settings = source.model_copy(update={"data_dir": tmp_path / "data"})
    shutil.copytree(source.data_dir, settings.data_dir)
    return settings


def test_every_payout_of_an_untouched_log_matches(paid: tuple[Settings, list[Event]]) -> None:
    settings, _ = paid
    ledger = _ledger(settings)
    assert len(ledger) >= 8

    reports = [audit_payout(settings, row.creator_id, row.day) for row in ledger]

    assert [(r.differences, r.notes) for r in reports] == [((), ())] * len(ledger)
    assert [(r.log_views, r.log_amount, r.log_digest) for r in reports] == [
        (row.monetizable_views, row.amount, row.counted_ids_digest) for row in ledger
    ]
    assert "MATCH: the ledger figure re-derives exactly from the raw log" in reports[0].render()


def test_an_unknown_payout_is_refused(paid: tuple[Settings, list[Event]]) -> None:
    with pytest.raises(PayoutNotFound, match="no payout in the ledger for creator 'c999' on 2026-06-01"):
        audit_payout(paid[0], "c999", date(2026, 6, 1))


def test_dropping_counted_views_from_one_raw_file_is_reported(
    paid: tuple[Settings, list[Event]], tmp_path: Path
) -> None:
    source, events = paid
    settings = _copy_of(source, tmp_path)
    row = max(_ledger(settings), key=lambda r: r.monetizable_views)
    counted = pq.read_table(payout_events_path(settings, row.run_id) / f"date={row.day.isoformat()}")
    counted_ids = set(counted.filter(pc.equal(counted["creator_id"], row.creator_id))["event_id"].to_pylist())
    copies = Counter(e.event_id for e in events)
    # Tamper with the input file holding the most counted views that the log holds once.
    target, dropped = max(
        (
            (path, sorted(set(ids) & {i for i in counted_ids if copies[i] == 1}))
            for path in row.input_files
            for ids in [pq.read_table(settings.raw_dir / path, columns=["event_id"])["event_id"].to_pylist()]
        ),
        key=lambda pair: len(pair[1]),
    )
    dropped = dropped[:3]
    table = pq.read_table(settings.raw_dir / target, partitioning=None)
    keep = pc.invert(pc.is_in(table["event_id"], value_set=pa.array(dropped)))
    pq.write_table(table.filter(keep), settings.raw_dir / target)
    remaining = [e for e in events if e.event_id not in set(dropped)]
    expected = oracle_views(remaining, CUTOFF, catalog_rows(TRAFFIC))[(row.creator_id, row.day)]
    assert dropped and expected != row.monetizable_views

    report = audit_payout(settings, row.creator_id, row.day)

    assert not report.matches
    assert (report.ledger_views, report.log_views) == (row.monetizable_views, expected)
    assert report.differences[0].startswith(f"file {target} changed (sha256 ")
    assert f"views {row.monetizable_views} != {expected} (ledger != raw log)" in report.differences
    ids_line = next(d for d in report.differences if d.startswith("event ids differ"))
    assert all(event_id in ids_line for event_id in dropped)
    with open_store(settings.store_url) as store:
        assert latest_payout(store, row.creator_id, row.day) == row  # the audit writes nothing
    text = report.render()
    assert "MISMATCH" in text and target in text


def test_a_compacted_log_proves_every_payout_and_names_a_changed_merged_file(
    paid: tuple[Settings, list[Event]], tmp_path: Path
) -> None:
    from quality import validate_raw
    from quality.compaction import compact_log

    settings = _copy_of(paid[0], tmp_path)
    ledger = _ledger(settings)
    assert validate_raw(settings, CUTOFF, None, "run-1").success  # the raw gate records the files
    compaction = compact_log(settings, CUTOFF)
    assert compaction.merged > compaction.written >= 1
    with open_store(settings.store_url) as store:
        moved = compacted_files(store)
    assert set(moved) & {path for row in ledger for path in row.input_files}  # the ledger names merged files

    reports = [audit_payout(settings, row.creator_id, row.day) for row in ledger]

    assert [(r.differences, r.notes) for r in reports] == [((), ())] * len(ledger)
    assert [r.log_digest for r in reports] == [row.counted_ids_digest for row in ledger]

    original, record = next(iter(sorted(moved.items())))
    merged = settings.raw_dir / record.into_path
    table = pq.read_table(merged, partitioning=None)
    pq.write_table(table.slice(1), merged)  # one row less
    row = next(r for r in ledger if original in r.input_files)

    report = audit_payout(settings, row.creator_id, row.day)

    assert f"file {original} (compacted into {record.into_path}) changed (sha256 " in report.differences[0]
