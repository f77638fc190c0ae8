"""The archiver's log writer: records to Parquet files under raw/ingest_date=/ingest_hour=, named by
topic, partition and offset range, written aside, fsynced and renamed, and resumed from the files."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from counting.event import Event
from counting.logschema import DICTIONARY_COLUMNS, EVENT_COLUMNS, LOG_COLUMNS
from counting.regions import accepted_here
from counting.rules import HOUR_MS, hour_of
from speed_layer import logs
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record, by_partition, decode_record

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in LOG_COLUMNS])
NAME_RE = re.compile(r"^(?P<topic>.+)-p(?P<partition>\d+)-(?P<first>\d+)-(?P<last>\d+)\.parquet$")
TMP_SUFFIX = ".tmp"
_log_fields = attrgetter(*EVENT_COLUMNS)


def file_name(topic: str, partition: int, first: int, last: int) -> str:
    """The log file of a partition's offset range; a re-run of the same range writes the same name."""
    return f"{topic}-p{partition}-{first:012d}-{last:012d}.parquet"


def hour_dir(raw_dir: Path, ingest_ts: int) -> Path:
    """The hive partition directory of an ingestion time (UTC)."""
    moment = datetime.fromtimestamp(ingest_ts / 1000, tz=UTC)
    return raw_dir / f"ingest_date={moment:%Y-%m-%d}" / f"ingest_hour={moment:%H}"


@dataclass
class ArchiveReport:
    """What one write did: rows and files written, records skipped (already in the log) or poison,
    and the next offset to write of each partition it touched."""

    rows: int = 0
    files: list[Path] = field(default_factory=list)
    skipped: int = 0
    poison: int = 0
    positions: dict[int, int] = field(default_factory=dict)


class ParquetLog:
    """The Parquet log of one topic under `raw_dir`; knows, from its files, what it already holds."""

    def __init__(self, raw_dir: Path, topic: str, region: str | None = None) -> None:
        """`region`: with several regions, this one's name: events accepted in another region (its
        reactions, forwarded here) belong to that region's log and are left out (decision 0006)."""
        self.raw_dir = raw_dir
        self.topic = topic
        self.region = region
        self._next: dict[int, int] | None = None
        # Writes run in worker threads; a batch cancelled by a rebalance may still be writing
        # when the restarted agent writes the redelivered records: one writer at a time.
        self._lock = threading.RLock()

    def _files(self, pattern: str) -> Iterable[tuple[Path, re.Match[str]]]:
        for path in self.raw_dir.glob(f"ingest_date=*/ingest_hour=*/{pattern}"):
            name = path.name
            if name.startswith(".") and name.endswith(TMP_SUFFIX):
                name = name[1 : -len(TMP_SUFFIX)]
            match = NAME_RE.match(name)
            if match and match["topic"] == self.topic:
                yield path, match

    def recover(self) -> None:
        """Finish or undo writes a crash interrupted. A batch's files are renamed only after all of
        them were fsynced, so: a leftover temp file whose batch has a final file is renamed (roll
        forward); one whose batch has none is deleted (roll back)."""
        with self._lock:
            self._recover()

    def _recover(self) -> None:
        finals = {path.name for path, _ in self._files("*.parquet")}
        for path, match in list(self._files(".*.parquet" + TMP_SUFFIX)):
            final = path.with_name(match.string)
            if final.name in finals:
                os.replace(path, final)
                fsync_dir(final.parent)
                logs.warning("archive_recovered", file=final, action="rename")
            else:
                path.unlink()
                logs.warning("archive_recovered", file=path, action="delete")
        self._next = None

    def positions(self) -> dict[int, int]:
        """The next offset to write of each partition the log has files of (last offset + 1)."""
        with self._lock:
            return self._positions()

    def _positions(self) -> dict[int, int]:
        if self._next is None:
            found: dict[int, int] = {}
            for _, match in self._files("*.parquet"):
                partition = int(match["partition"])
                found[partition] = max(found.get(partition, 0), int(match["last"]) + 1)
            self._next = found
        return dict(self._next)

    def forget(self) -> None:
        """Re-read the positions from the files next time (after a rebalance: another worker may
        have written meanwhile)."""
        with self._lock:
            self._next = None

    def write(self, records: list[Record]) -> ArchiveReport:
        """Write the records not yet in the log; each partition's files are in place (fsynced,
        renamed) when this returns. Poison records are passed over (the counter dead-letters them)."""
        with self._lock:
            return self._write(records)

    def _write(self, records: list[Record]) -> ArchiveReport:
        report = ArchiveReport()
        for (topic, partition), group in by_partition(records).items():
            if topic != self.topic:
                raise ValueError(f"record of topic {topic!r} given to the log of {self.topic!r}")
            expected = self._positions().get(partition, 0)
            if group[0].offset != expected:
                self._next = None
                expected = self._positions().get(partition, 0)
            fresh = [r for r in group if r.offset >= expected]
            report.skipped += len(group) - len(fresh)
            if not fresh:
                continue
            self._write_partition(partition, fresh, report)
            assert self._next is not None
            self._next[partition] = fresh[-1].offset + 1
            report.positions[partition] = fresh[-1].offset + 1
        return report

    def _write_partition(self, partition: int, records: list[Record], report: ArchiveReport) -> None:
        # By hour of ingestion (a record's events share one ingestion time): its directory is made
        # once an hour, not once an event.
        hours: dict[int, list[tuple[Event, int]]] = {}
        for record in records:
            try:
                events = decode_record(record.value)
            except PoisonRecord as exc:
                report.poison += 1
                logs.warning(
                    "archive_poison",
                    topic=self.topic,
                    partition=partition,
                    offset=record.offset,
                    reason=exc.reason,
                )
                continue
            for event in events:
                assert event.ingest_ts is not None
                if self.region is not None and not accepted_here(event, self.region):
                    continue
                hours.setdefault(hour_of(event.ingest_ts), []).append((event, record.offset))
        rows = {hour_dir(self.raw_dir, hour * HOUR_MS): pairs for hour, pairs in hours.items()}
        name = file_name(self.topic, partition, records[0].offset, records[-1].offset)
        staged: list[tuple[Path, Path]] = []
        for directory, pairs in sorted(rows.items()):
            directory.mkdir(parents=True, exist_ok=True)
            final = directory / name
            temp = directory / f".{name}{TMP_SUFFIX}"
            _write_table(temp, pairs, partition)
            staged.append((temp, final))
        for temp, final in staged:
            os.replace(temp, final)
        for directory in {final.parent for _, final in staged}:
            fsync_dir(directory)
            fsync_dir(directory.parent)
            fsync_dir(directory.parent.parent)
        report.rows += sum(len(pairs) for pairs in rows.values())
        report.files.extend(final for _, final in staged)


def table_of(events: list[tuple[Event, int]], partition: int) -> pa.Table:
    """The log rows of (event, offset) pairs of one partition, in the log's column order."""
    # Each event's fields in one call, then transposed: a column per field.
    fields = [_log_fields(event) for event, _ in events]
    columns = zip(*fields, strict=True) if fields else ([] for _ in EVENT_COLUMNS)
    data: dict[str, object] = {
        **dict(zip(EVENT_COLUMNS, columns, strict=True)),
        "kafka_partition": [partition] * len(events),
        "kafka_offset": [offset for _, offset in events],
    }
    return pa.Table.from_pydict(data, schema=SCHEMA)


def log_file_writer(where: Path | BinaryIO) -> pq.ParquetWriter:
    """A writer of one Parquet file of the log, row group by row group: only `DICTIONARY_COLUMNS`
    dictionary-encoded."""
    return pq.ParquetWriter(where, SCHEMA, use_dictionary=list(DICTIONARY_COLUMNS))


def write_log_file(table: pa.Table, where: Path | BinaryIO) -> None:
    """Write log rows as one Parquet file of the log."""
    with log_file_writer(where) as writer:
        writer.write_table(table)


def _write_table(path: Path, events: list[tuple[Event, int]], partition: int) -> None:
    with open(path, "wb") as handle:
        write_log_file(table_of(events, partition), handle)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
