"""`tally speed rebuild` replays the log in ingestion order across partitions (a hot video's viewer
whose events moved to another partition keeps its first view counted first), one partition's run
at a time."""

from __future__ import annotations

from pathlib import Path

import msgspec

from counting.event import Event
from counting.settings import Settings
from speed_layer.counter.rebuild import archived, in_ingestion_order, partition_runs
from speed_layer.records import Record
from tests.logfiles import hour_folder, log_rows, write_rows
from tests.speed_layer.helpers import Traffic

T0 = 1_800_000_000_000  # on a bucket edge of 2 s buckets


def _view(event_id: str, ingest_ts: int) -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id="viral",
        ts=ingest_ts - 100,
        user_id="alice",
        session_id="s",
        watch_secs=60.0,
        ingest_ts=ingest_ts,
    )


def _write_partition(raw_dir: Path, partition: int, events: list[Event]) -> None:
    rows = log_rows(events)
    for row in rows:
        row["kafka_partition"] = partition
    write_rows(hour_folder(raw_dir, events[0].ingest_ts or 0), f"events-{partition}-00000.parquet", rows)


def test_the_archived_records_come_in_ingestion_order_across_partitions(settings: Settings) -> None:
    # Alice's first view went to partition 1, her second, 5 s later, to partition 0 (the video had
    # more shards by then): partition 0 sorts first by number, not by ingestion. (The state counter's
    # rebuild of a real move: test_state_counter.py.)
    first, second = _view("a1", T0 + 500), _view("a2", T0 + 5_500)
    _write_partition(settings.raw_dir, 1, [first])
    _write_partition(settings.raw_dir, 0, [second])

    records = in_ingestion_order(archived(settings))

    assert [(r.partition, r.offset) for r in records] == [(1, 0), (0, 0)]
    assert [Traffic.decode(r)[0].event_id for r in records] == ["a1", "a2"]


def test_partition_runs_keep_the_order_and_split_at_each_partition_change() -> None:
    records = [Record("t", p, o, msgspec.msgpack.encode([])) for p, o in [(0, 0), (0, 1), (1, 0), (0, 2)]]
    runs = partition_runs(records, 10)
    assert [[(r.partition, r.offset) for r in run] for run in runs] == [[(0, 0), (0, 1)], [(1, 0)], [(0, 2)]]
    assert [len(run) for run in partition_runs(records[:2], 1)] == [1, 1]
