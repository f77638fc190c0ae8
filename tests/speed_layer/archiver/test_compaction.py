"""Merging a partition's files of one hour: the rows of the archiver's files, in offset order, in
one file named by the offsets they span, written in row groups of a bounded size."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from counting.wire import encode_events
from speed_layer.archiver import compaction
from speed_layer.archiver.archiver import ParquetLog, file_name, hour_dir
from speed_layer.archiver.compaction import log_files, merge, remove
from speed_layer.records import Record
from tests.speed_layer.helpers import Traffic

HOUR = 3_600_000
START = 1_795_000_000_000 // HOUR * HOUR + 60_000  # a minute into an hour (UTC)
TOPIC = "events"


def test_a_merged_file_holds_the_files_rows_in_offset_order_in_bounded_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = Traffic(seed=5, now_ms=START, step_ms=500).mixed(n=400)
    log = ParquetLog(tmp_path, TOPIC)
    records = [Record(TOPIC, 3, offset, encode_events([event])) for offset, event in enumerate(events)]
    for first in range(0, len(records), 70):  # six flushes
        log.write(records[first : first + 70])
    folder = hour_dir(tmp_path, START)
    files = log_files(folder)
    assert [(f.first, f.last) for f in files] == [
        (i, min(i + 69, len(records) - 1)) for i in range(0, 400, 70)
    ]
    monkeypatch.setattr(compaction, "ROW_GROUP_ROWS", 150)

    path, rows = merge(files)
    remove(files)

    assert path == folder / file_name(TOPIC, 3, 0, len(records) - 1)
    assert [f.path for f in log_files(folder)] == [path]
    table = pq.read_table(path, partitioning=None)
    assert rows == table.num_rows == len(events)
    assert table["kafka_offset"].to_pylist() == list(range(len(events)))
    assert table["event_id"].to_pylist() == [e.event_id for e in events]
    groups = [
        pq.ParquetFile(path).metadata.row_group(i).num_rows
        for i in range(pq.ParquetFile(path).num_row_groups)
    ]
    assert groups == [210, 190]  # three files make a group of at least 150 rows; the rest after
    assert ds.dataset(tmp_path, format="parquet").to_table().num_rows == len(events)
    log.forget()
    assert log.positions() == {3: len(records)}
