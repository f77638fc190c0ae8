"""The Parquet log writer: hive directories by ingestion hour, one file per partition offset range,
exactly once across restarts, crash recovery of half-renamed batches."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from counting.event import Event
from counting.logschema import DICTIONARY_COLUMNS, LOG_COLUMNS
from counting.wire import encode_events
from speed_layer.archiver.archiver import ParquetLog, file_name, hour_dir
from speed_layer.records import Record
from tests.speed_layer.helpers import Traffic

HOUR = 3_600_000
START = 1_795_000_000_000 // HOUR * HOUR + HOUR - 2_000  # two seconds before an hour edge (UTC)
TOPIC = "events-a-b"


def _records(events: list[Event], partition: int, first_offset: int, per_record: int = 4) -> list[Record]:
    return [
        Record(TOPIC, partition, first_offset + i, encode_events(events[start : start + per_record]))
        for i, start in enumerate(range(0, len(events), per_record))
    ]


def _rows(raw_dir: Path) -> list[dict[str, object]]:
    return ds.dataset(raw_dir, format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.fixture
def events() -> list[Event]:
    return Traffic(seed=31, now_ms=START, step_ms=40).mixed(n=200)


def test_writes_rows_into_their_ingest_hour_with_offsets(tmp_path: Path, events: list[Event]) -> None:
    log = ParquetLog(tmp_path, TOPIC)
    records = _records(events, partition=1, first_offset=10)
    report = log.write(records)
    assert report.rows == len(events)
    assert report.positions == {1: records[-1].offset + 1}
    name = file_name(TOPIC, 1, 10, records[-1].offset)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in report.files) == sorted(
        {f"{hour_dir(Path(), e.ingest_ts or 0).as_posix()}/{name}" for e in events}
    )
    assert len(report.files) == 2  # the batch straddles an hour edge
    rows = _rows(tmp_path)
    assert sorted((r["event_id"], r["ingest_ts"], r["kafka_partition"]) for r in rows) == sorted(
        (e.event_id, e.ingest_ts, 1) for e in events
    )
    offsets = {(r["event_id"], r["ingest_ts"]): r["kafka_offset"] for r in rows}
    for record in records:
        for event in Traffic.decode(record):
            assert offsets[(event.event_id, event.ingest_ts)] == record.offset
    assert pq.read_schema(report.files[0]).names == [name for name, _ in LOG_COLUMNS]


def test_only_the_dictionary_columns_are_dictionary_encoded(tmp_path: Path, events: list[Event]) -> None:
    report = ParquetLog(tmp_path, TOPIC).write(_records(events, partition=0, first_offset=0))
    for path in report.files:
        metadata = pq.ParquetFile(path).metadata
        for group in range(metadata.num_row_groups):
            chunks = [metadata.row_group(group).column(i) for i in range(metadata.num_columns)]
            encoded = {chunk.path_in_schema for chunk in chunks if chunk.has_dictionary_page}
            assert encoded == set(DICTIONARY_COLUMNS)
            for chunk in chunks:
                assert ("RLE_DICTIONARY" in chunk.encodings) == (chunk.path_in_schema in DICTIONARY_COLUMNS)


def test_a_rerun_and_a_restart_write_nothing_twice(tmp_path: Path, events: list[Event]) -> None:
    records = _records(events, partition=0, first_offset=0)
    half = len(records) // 2
    ParquetLog(tmp_path, TOPIC).write(records[:half])
    again = ParquetLog(tmp_path, TOPIC)  # a restarted archiver learns its position from the files
    assert again.positions() == {0: half}
    report = again.write(records)  # redelivered from an older committed offset
    assert report.skipped == half
    assert again.write(records).rows == 0
    assert sorted(r["event_id"] for r in _rows(tmp_path)) == sorted(e.event_id for e in events)


def test_other_topics_files_do_not_count(tmp_path: Path, events: list[Event]) -> None:
    ParquetLog(tmp_path, "events").write([Record("events", 0, 0, encode_events(events[:3]))])
    assert ParquetLog(tmp_path, TOPIC).positions() == {}
    assert ParquetLog(tmp_path, "events").positions() == {0: 1}


def test_poison_records_are_passed_over_but_covered_by_the_offset_range(
    tmp_path: Path, events: list[Event]
) -> None:
    log = ParquetLog(tmp_path, TOPIC)
    records = [Record(TOPIC, 0, 0, encode_events(events[:3])), Record(TOPIC, 0, 1, b"\xffjunk")]
    report = log.write(records)
    assert (report.rows, report.poison, report.positions) == (3, 1, {0: 2})
    assert report.files[0].name == file_name(TOPIC, 0, 0, 1)


def test_recovery_finishes_a_half_renamed_batch_and_drops_an_unrenamed_one(
    tmp_path: Path, events: list[Event]
) -> None:
    log = ParquetLog(tmp_path, TOPIC)
    report = log.write(_records(events, partition=0, first_offset=0))
    renamed, not_yet = sorted(report.files)
    not_yet.rename(not_yet.with_name(f".{not_yet.name}.tmp"))  # crash between the two renames
    orphan = renamed.with_name(f".{file_name(TOPIC, 0, 99, 120)}.tmp")  # crash before any rename
    orphan.write_bytes(b"partial")
    log.recover()
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(report.files)
    assert len(_rows(tmp_path)) == len(events)
