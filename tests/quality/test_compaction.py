"""Compaction of the raw log: the archiver's files of each closed hour, once the raw gate validated
them, merged into one file a partition that holds the same rows and is recorded as validated; the
gate then finds nothing missing or new, a stopped compaction is finished or undone, and files the
gate has not validated are left as they are."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from counting.event import Event
from counting.settings import Settings
from counting.wire import encode_events
from quality import require_validated_inputs, validate_raw
from quality.compaction import LOCK_FILE, compact_log
from quality.inputs import check_inputs, known_files
from speed_layer.archiver.archiver import ParquetLog, file_name, hour_dir
from speed_layer.archiver.compaction import log_files, merge
from speed_layer.records import Record
from tests.speed_layer.helpers import Traffic
from warehouse.migrate import migrate
from warehouse.store import compacted_files, open_store, validated_files

HOUR = 3_600_000
START = 1_795_000_000_000 // HOUR * HOUR + HOUR - 1_800_000  # half an hour before an hour edge (UTC)
EDGE = START + 1_800_000  # the first hour ends here
TOPIC = "events"
FLUSHES = 6  # archiver writes a partition


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(data_dir=tmp_path / "data")
    migrate(settings.store_url)
    return settings


@pytest.fixture
def events() -> list[Event]:
    """About an hour of traffic, half before the hour edge and half after."""
    traffic = Traffic(seed=52, now_ms=START, step_ms=24_000)
    return traffic.mixed(n=300)


def _archive(settings: Settings, events: list[Event]) -> ParquetLog:
    """The events through the archiver's writer: two partitions, `FLUSHES` writes each, a record an
    event (a retry is a record of its own, as the ingest API sends it)."""
    log = ParquetLog(settings.raw_dir, TOPIC)
    for partition in (0, 1):
        mine = events[partition::2]
        records = [
            Record(TOPIC, partition, offset, encode_events([event])) for offset, event in enumerate(mine)
        ]
        size = -(-len(records) // FLUSHES)
        for first in range(0, len(records), size):
            log.write(records[first : first + size])
    return log


def _rows(settings: Settings) -> list[tuple[object, ...]]:
    table = ds.dataset(settings.raw_dir, format="parquet", partitioning="hive").to_table()
    columns = [table[c].to_pylist() for c in ("event_id", "ingest_ts", "kafka_partition", "kafka_offset")]
    return sorted(zip(*columns, strict=True))


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.parquet"))


def test_a_closed_hour_becomes_one_validated_file_a_partition(
    settings: Settings, events: list[Event]
) -> None:
    log = _archive(settings, events)
    first_hour, second_hour = hour_dir(settings.raw_dir, START), hour_dir(settings.raw_dir, EDGE)
    before = _rows(settings)
    originals = {f.path.relative_to(settings.raw_dir).as_posix(): f for f in log_files(first_hour)}
    positions = log.positions()
    later = _files(second_hour)
    assert sorted(f.partition for f in originals.values()).count(0) >= 2  # several flushes an hour
    assert sorted(f.partition for f in originals.values()).count(1) >= 2
    cutoff = EDGE + HOUR
    assert validate_raw(settings, cutoff, None, "run-1").success

    report = compact_log(settings, EDGE)

    merged = log_files(first_hour)
    assert [(f.partition, f.path.name) for f in merged] == [
        (p, file_name(TOPIC, p, min(o.first for o in mine), max(o.last for o in mine)))
        for p in (0, 1)
        for mine in [[o for o in originals.values() if o.partition == p]]
    ]
    first_hour_rows = sum(1 for row in before if int(str(row[1])) < EDGE)
    assert (report.hours, report.merged, report.written, report.rows) == (
        1,
        len(originals),
        2,
        first_hour_rows,
    )
    assert _files(second_hour) == later  # the open hour is left as written
    assert _rows(settings) == before
    log.forget()
    assert log.positions() == positions  # the archiver resumes where it was
    with open_store(settings.store_url) as store:
        validated, moved = validated_files(store), compacted_files(store)
    for merged_file in merged:
        relative = merged_file.path.relative_to(settings.raw_dir).as_posix()
        assert validated[relative].validated_by == "run-1"  # the run whose gate passed its rows
    assert set(moved) == set(originals)
    assert not set(originals) & set(validated)
    assert {m.into_path for m in moved.values()} == {
        f.path.relative_to(settings.raw_dir).as_posix() for f in merged
    }
    check = check_inputs(settings.raw_dir, cutoff, known_files(settings.store_url))
    assert (check.pending, check.missing, check.changed) == ((), (), ())
    require_validated_inputs(settings.raw_dir, settings.store_url, cutoff, "run-2")
    assert validate_raw(settings, cutoff, None, "run-2").files == ()  # nothing new to check

    again = compact_log(settings, EDGE)

    assert (again.merged, again.written, again.recovered) == (0, 0, 0)


def test_files_the_gate_has_not_validated_are_left(settings: Settings, events: list[Event]) -> None:
    _archive(settings, events)
    first_hour = hour_dir(settings.raw_dir, START)
    names = _files(first_hour)

    report = compact_log(settings, EDGE)

    assert (report.merged, report.written) == (0, 0)
    assert _files(first_hour) == names
    assert len(report.left) == 2
    assert report.left[0].startswith(f"{first_hour.relative_to(settings.raw_dir).as_posix()} p0: ")
    assert "not validated with their current checksum" in report.left[0]
    assert "the next run validates them" in report.left[0]


def test_a_compaction_stopped_before_its_record_is_undone(settings: Settings, events: list[Event]) -> None:
    _archive(settings, events)
    first_hour = hour_dir(settings.raw_dir, START)
    validate_raw(settings, EDGE + HOUR, None, "run-1")
    before = _rows(settings)
    originals = len(_files(first_hour))
    stray, _ = merge([f for f in log_files(first_hour) if f.partition == 0])  # written, never recorded

    report = compact_log(settings, EDGE)

    assert report.recovered == 1
    assert (report.merged, report.written) == (originals, 2)
    assert _rows(settings) == before
    assert [f.partition for f in log_files(first_hour)] == [0, 1]
    assert stray.name in _files(first_hour)  # the same name, now the recorded merge
    check = check_inputs(settings.raw_dir, EDGE + HOUR, known_files(settings.store_url))
    assert (check.pending, check.missing) == ((), ())


def test_a_compaction_stopped_before_removing_the_merged_files_is_finished(
    settings: Settings, events: list[Event], tmp_path: Path
) -> None:
    _archive(settings, events)
    first_hour = hour_dir(settings.raw_dir, START)
    validate_raw(settings, EDGE + HOUR, None, "run-1")
    before = _rows(settings)
    kept = tmp_path / "kept"
    shutil.copytree(first_hour, kept)
    compact_log(settings, EDGE)
    for path in kept.glob("*.parquet"):  # as if the merged files had not been removed
        shutil.copy2(path, first_hour / path.name)
    assert len(_files(first_hour)) > 2

    report = compact_log(settings, EDGE)

    assert report.recovered == 2
    assert (report.merged, report.written) == (0, 0)
    assert [f.partition for f in log_files(first_hour)] == [0, 1]
    assert _rows(settings) == before
    check = check_inputs(settings.raw_dir, EDGE + HOUR, known_files(settings.store_url))
    assert (check.pending, check.missing) == ((), ())


def test_one_compaction_of_a_log_at_a_time(settings: Settings, events: list[Event]) -> None:
    _archive(settings, events)
    first_hour = hour_dir(settings.raw_dir, START)
    validate_raw(settings, EDGE + HOUR, None, "run-1")
    names = _files(first_hour)
    with open(settings.raw_dir / LOCK_FILE, "a") as held:  # another compaction holds the log
        fcntl.flock(held, fcntl.LOCK_EX)

        report = compact_log(settings, EDGE)

    assert (report.merged, report.written) == (0, 0)
    assert report.left == ["another compaction of this log is running: it merges what this one would"]
    assert _files(first_hour) == names

    assert compact_log(settings, EDGE).written == 2  # once it is done
