"""Compaction of the Parquet log: the files of one hour and Kafka partition merged into one, named by
the first and last offsets they span, written aside, fsynced and renamed. Which files may be merged
and when the merged ones go is the raw gate's call (`quality.compaction`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from speed_layer.archiver.archiver import NAME_RE, SCHEMA, TMP_SUFFIX, file_name, fsync_dir, log_file_writer

# Rows a merged file's row groups hold (the last one fewer): a merge keeps at most this many rows and
# one source file in memory.
ROW_GROUP_ROWS = 1 << 20


@dataclass(frozen=True)
class LogFile:
    """A final file of the log: its path and the topic, partition and offsets its name gives."""

    path: Path
    topic: str
    partition: int
    first: int
    last: int

    def holds(self, other: LogFile) -> bool:
        """Whether this file's offsets span another's of the same topic and partition (a merged
        file beside one it was merged from: a compaction stopped before it removed them)."""
        return (
            self is not other
            and (self.topic, self.partition) == (other.topic, other.partition)
            and self.first <= other.first
            and other.last <= self.last
            and (self.first, self.last) != (other.first, other.last)
        )


def log_files(hour_dir: Path) -> list[LogFile]:
    """The final log files of an hour directory, by topic, partition and first offset."""
    found = []
    for path in hour_dir.glob("*.parquet"):
        match = NAME_RE.match(path.name)
        if match is not None:
            found.append(
                LogFile(
                    path, match["topic"], int(match["partition"]), int(match["first"]), int(match["last"])
                )
            )
    return sorted(found, key=lambda f: (f.topic, f.partition, f.first, f.last))


def writes_unfinished(hour_dir: Path) -> bool:
    """Whether an hour directory holds a temp file: a write the archiver's recovery has to finish or
    undo first."""
    return any(path.name.endswith(TMP_SUFFIX) for path in hour_dir.glob(".*"))


def merge(files: Sequence[LogFile]) -> tuple[Path, int]:
    """Write the rows of `files` (one hour directory, topic and partition, in offset order) as one
    log file beside them, in place (fsynced, renamed) when this returns; the files themselves are
    left. Returns the new file's path and its rows."""
    first = files[0]
    if any(
        (f.path.parent, f.topic, f.partition) != (first.path.parent, first.topic, first.partition)
        for f in files
    ):
        raise ValueError(f"merge takes files of one hour directory, topic and partition (got {files!r})")
    ordered = sorted(files, key=lambda f: f.first)
    name = file_name(first.topic, first.partition, ordered[0].first, max(f.last for f in ordered))
    directory = first.path.parent
    final = directory / name
    temp = directory / f".{name}{TMP_SUFFIX}"
    rows = waiting_rows = 0
    with open(temp, "wb") as handle:
        with log_file_writer(handle) as writer:
            waiting: list[pa.Table] = []
            for log_file in ordered:  # a file at a time: memory holds at most a row group and a file
                waiting.append(pq.ParquetFile(log_file.path).read().cast(SCHEMA))
                waiting_rows += waiting[-1].num_rows
                if waiting_rows >= ROW_GROUP_ROWS:
                    rows += _write_group(writer, waiting)
                    waiting_rows = 0
            rows += _write_group(writer, waiting)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, final)
    fsync_dir(directory)
    return final, rows


def _write_group(writer: pq.ParquetWriter, waiting: list[pa.Table]) -> int:
    """Write the waiting tables as one row group; returns its rows."""
    if not waiting:
        return 0
    table = pa.concat_tables(waiting)
    writer.write_table(table, row_group_size=max(1, table.num_rows))
    waiting.clear()
    return table.num_rows


def remove(files: Sequence[LogFile]) -> None:
    """Remove log files (merged into another, and recorded so) and make the removal durable."""
    for log_file in files:
        log_file.path.unlink(missing_ok=True)
    for directory in {f.path.parent for f in files}:
        fsync_dir(directory)
