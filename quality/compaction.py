"""Compaction of the raw log's closed hours: the validated files of an hour and Kafka partition merged
into one file, recorded as validated, the files it replaces recorded as held by it; so a run reads a
few files an hour instead of one a flush, and the raw gate and the payout audit still account for
every row. Only files validated with their current checksum are merged."""

from __future__ import annotations

import fcntl
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from counting.logs import Log
from counting.rules import HOUR_MS
from counting.settings import Settings
from quality import frames
from quality.errors import CompactionFailed
from quality.inputs import fingerprint
from speed_layer.archiver.compaction import LogFile, log_files, merge, remove, writes_unfinished
from warehouse.compacted import CompactedFile, compacted_files, record_compaction
from warehouse.store import open_store, validated_files
from warehouse.validated import ValidatedFile

log = Log("tally.compaction")

# Held while a compaction runs, beside the log's hour directories (Spark and the raw gate pass over
# names starting with a dot).
LOCK_FILE = ".compaction.lock"

COMPACTED_BY = (
    "compaction"  # `validated_by` of a merged file: its rows were validated in the files it replaces
)


@dataclass
class CompactionReport:
    """What a compaction did: hour directories it merged files in, the files merged (and removed),
    the files written with their rows, files of a compaction stopped midway that it finished or
    undid, and the (hour, partition) groups it left, with why."""

    hours: int = 0
    merged: int = 0
    written: int = 0
    rows: int = 0
    recovered: int = 0
    left: list[str] = field(default_factory=list)


def compact_log(settings: Settings, before_ms: int, now: datetime | None = None) -> CompactionReport:
    """Merge the files of each hour that ends at or before `before_ms` (a closed cutoff: the archiver
    writes no more rows there), a file per topic and partition, where each is validated with its
    current checksum (the store must be migrated). One compaction of a log at a time: while another
    runs, this one does nothing and says so in `left`."""
    report = CompactionReport()
    if not settings.raw_dir.is_dir():
        return report
    with open(settings.raw_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report.left.append("another compaction of this log is running: it merges what this one would")
            return report
        return _compact(settings, before_ms, now, report)


def _compact(
    settings: Settings, before_ms: int, now: datetime | None, report: CompactionReport
) -> CompactionReport:
    raw_dir = settings.raw_dir
    moment = now or datetime.now(UTC)
    with open_store(settings.store_url) as store:
        known = validated_files(store)
        moved = compacted_files(store)
    hours: dict[Path, None] = {}
    for path in frames.raw_files(raw_dir, 0, before_ms):
        start = frames.hour_start_ms(path.parent)
        if start is not None and start + HOUR_MS <= before_ms:
            hours[path.parent] = None
    for hour_dir in hours:
        if writes_unfinished(hour_dir):
            report.left.append(
                f"{_relative(hour_dir, raw_dir)}: a write is unfinished (the archiver recovers it)"
            )
            continue
        files = _recovered(log_files(hour_dir), raw_dir, known, moved, report)
        groups: dict[tuple[str, int], list[LogFile]] = defaultdict(list)
        for log_file in files:
            groups[(log_file.topic, log_file.partition)].append(log_file)
        compacted = False
        for (topic, partition), group in groups.items():
            if len(group) < 2:
                continue
            where = f"{_relative(hour_dir, raw_dir)} p{partition}"
            if any(a.holds(b) for a in group for b in group):
                report.left.append(f"{where}: files whose offsets overlap, not recorded as merged: left")
                continue
            records = [_validated(f, raw_dir, known) for f in group]
            unvalidated = [f for f, r in zip(group, records, strict=True) if r is None]
            if unvalidated:
                report.left.append(
                    f"{where}: {len(unvalidated)} file(s) not validated with their current checksum "
                    f"(e.g. {unvalidated[0].path.name}); the next run validates them"
                )
                continue
            _merge(settings, group, [r for r in records if r is not None], moment, report)
            compacted = True
            log.info(
                "log_compacted",
                hour=_relative(hour_dir, raw_dir),
                topic=topic,
                partition=partition,
                files=len(group),
            )
        report.hours += compacted
    return report


def _merge(
    settings: Settings,
    group: list[LogFile],
    records: list[ValidatedFile],
    moment: datetime,
    report: CompactionReport,
) -> None:
    raw_dir = settings.raw_dir
    path, rows = merge(group)
    expected = sum(r.rows for r in records)
    if rows != expected:
        path.unlink()
        where = f"{_relative(group[0].path.parent, raw_dir)} p{group[0].partition}"
        raise CompactionFailed(
            f"the files of {where} hold {rows} rows, their validation recorded {expected}: nothing "
            "was merged; run the batch, whose raw gate validates them again, then compact"
        )
    # Its rows passed the raw gate in the files it replaces: its record is the latest of theirs.
    latest = max(records, key=lambda r: r.validated_at)
    into = fingerprint(path, raw_dir).validated(rows, latest.validated_at, latest.validated_by)
    held = [CompactedFile(r.path, r.sha256, r.rows, into.path, into.sha256, moment) for r in records]
    with open_store(settings.store_url) as store:
        record_compaction(store, into, held)
    remove(group)
    report.merged += len(group)
    report.written += 1
    report.rows += rows


def _validated(log_file: LogFile, raw_dir: Path, known: dict[str, ValidatedFile]) -> ValidatedFile | None:
    """The file's validation record, if it holds for the file as it is now (same size and times, or
    same checksum)."""
    record = known.get(_relative(log_file.path, raw_dir))
    if record is None:
        return None
    found = log_file.path.stat()
    if (record.size, record.mtime_ns, record.ctime_ns) == (
        found.st_size,
        found.st_mtime_ns,
        found.st_ctime_ns,
    ):
        return record
    return record if fingerprint(log_file.path, raw_dir).sha256 == record.sha256 else None


def _recovered(
    files: list[LogFile],
    raw_dir: Path,
    known: dict[str, ValidatedFile],
    moved: dict[str, CompactedFile],
    report: CompactionReport,
) -> list[LogFile]:
    """The files of an hour once a compaction stopped midway is finished or undone: a merged file
    beside files it spans is kept, and they go, if the store records it (the merge was recorded);
    else it goes (the files it was merged from are still the validated ones)."""
    gone: set[Path] = set()
    for container in files:
        spanned = [f for f in files if container.holds(f) and f.path not in gone]
        if not spanned or container.path in gone:
            continue
        relative = _relative(container.path, raw_dir)
        if relative in known:  # the merge was recorded: the files it holds go, if recorded so
            done = [f for f in spanned if _moved_into(moved.get(_relative(f.path, raw_dir)), relative)]
            remove(done)
            gone.update(f.path for f in done)
            action = "removed the merged files"
        else:
            remove([container])
            gone.add(container.path)
            action = "removed the unrecorded merged file"
        report.recovered += 1
        log.warning("compaction_recovered", file=relative, action=action)
    return [f for f in files if f.path not in gone]


def _moved_into(record: CompactedFile | None, into: str) -> bool:
    return record is not None and record.into_path == into


def _relative(path: Path, raw_dir: Path) -> str:
    return path.relative_to(raw_dir).as_posix()
