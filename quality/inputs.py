"""The raw files a batch run reads, and which of them passed validation with the checksum they have
now: a run validates every file it reads that is not yet validated so, whatever interval the file
belongs to, and reads nothing else (see `quality.validate.validate_raw`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from quality import frames
from quality.errors import MissingInputs, UnvalidatedInputs
from warehouse.store import ValidatedFile, open_store, quarantined_files, record_validated, validated_files
from warehouse.tables import file_digest

_SHOWN = 5  # files named in one message before "..."


@dataclass(frozen=True)
class Fingerprint:
    """A raw file as found now: its path relative to the raw directory, sha256 and stat fields."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int

    def validated(self, rows: int, at: datetime, by: str) -> ValidatedFile:
        return ValidatedFile(self.path, self.sha256, self.size, self.mtime_ns, self.ctime_ns, rows, at, by)


@dataclass(frozen=True)
class InputCheck:
    """The files a run at `cutoff` reads: those validated before with their current checksum, and
    the pending ones (new, or changed since they were validated). `restated`: validated files whose
    stat fields changed but not their bytes (their record is refreshed); `missing`: validated files
    of the partitions it reads that are gone (their events would silently drop out of the counts)."""

    cutoff: int
    validated: tuple[str, ...]
    pending: tuple[Fingerprint, ...]
    changed: tuple[str, ...]
    restated: tuple[ValidatedFile, ...] = ()
    # Validated files of partitions the run reads that are gone from the log (not in quarantine).
    missing: tuple[ValidatedFile, ...] = ()

    @property
    def read(self) -> int:
        return len(self.validated) + len(self.pending)


def may_hold_rows_before(path: Path, cutoff_ms: int) -> bool:
    """Whether a log file can hold a row ingested before the cutoff, by the `ingest_ts` statistics
    in its footer; a file without them, or unreadable, counts as read (validation says why)."""
    try:
        metadata = pq.ParquetFile(path).metadata
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        if "ingest_ts" not in names or metadata.num_row_groups == 0:
            return True
        index = names.index("ingest_ts")
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if stats is None or not stats.has_min_max or stats.min < cutoff_ms:
                return True
    except (OSError, pa.ArrowException, TypeError):
        return True
    return False


def run_inputs(raw_dir: Path, cutoff_ms: int) -> list[Path]:
    """The log files a run at `cutoff_ms` reads: those of the hour partitions before the cutoff
    (as the batch's `read_log` prunes them) that can hold a row ingested before it."""
    return [p for p in frames.raw_files(raw_dir, 0, cutoff_ms) if may_hold_rows_before(p, cutoff_ms)]


def _stat(path: Path) -> tuple[int, int, int]:
    found = os.stat(path)
    return found.st_size, found.st_mtime_ns, found.st_ctime_ns


def fingerprint(path: Path, raw_dir: Path) -> Fingerprint:
    size, mtime_ns, ctime_ns = _stat(path)
    return Fingerprint(path.relative_to(raw_dir).as_posix(), file_digest(path), size, mtime_ns, ctime_ns)


def check_inputs(raw_dir: Path, cutoff_ms: int, known: Mapping[str, ValidatedFile]) -> InputCheck:
    """Split the files a run reads into validated and pending. A file whose size and times are those
    recorded is not read again (rewriting a file changes its ctime, which no tool can set back);
    any other is hashed, and pending unless its sha256 is the validated one. Only the footers of
    files not validated so are read (to leave out those holding no row before the cutoff)."""
    validated: list[str] = []
    pending: list[Fingerprint] = []
    changed: list[str] = []
    restated: list[ValidatedFile] = []
    files = frames.raw_files(raw_dir, 0, cutoff_ms)
    present = {path.relative_to(raw_dir).as_posix() for path in files}
    missing = tuple(
        record
        for relative, record in sorted(known.items())
        if relative not in present and _read_before(relative, cutoff_ms) and not (raw_dir / relative).exists()
    )
    for path in files:
        relative = path.relative_to(raw_dir).as_posix()
        record = known.get(relative)
        if record is not None and (record.size, record.mtime_ns, record.ctime_ns) == _stat(path):
            validated.append(relative)
            continue
        if not may_hold_rows_before(path, cutoff_ms):
            continue
        found = fingerprint(path, raw_dir)
        if record is not None and record.sha256 == found.sha256:
            validated.append(relative)
            restated.append(
                replace(record, size=found.size, mtime_ns=found.mtime_ns, ctime_ns=found.ctime_ns)
            )
            continue
        pending.append(found)
        if record is not None:
            changed.append(relative)
    return InputCheck(cutoff_ms, tuple(validated), tuple(pending), tuple(changed), tuple(restated), missing)


def _read_before(relative: str, cutoff_ms: int) -> bool:
    """Whether a run at `cutoff_ms` reads the hour partition of a log path."""
    start = frames.hour_start_ms(Path(relative).parent)
    return start is not None and start < cutoff_ms


def require_present(check: InputCheck, run_id: str) -> None:
    """Raise `MissingInputs` naming the validated files gone from the log."""
    if not check.missing:
        return
    named = "; ".join(
        f"{f.path} ({f.rows} rows, validated by {f.validated_by} at {f.validated_at:%Y-%m-%d %H:%M:%S} UTC)"
        for f in check.missing[:_SHOWN]
    )
    more = f" and {len(check.missing) - _SHOWN} more" if len(check.missing) > _SHOWN else ""
    raise MissingInputs(
        f"run {run_id!r}: {len(check.missing)} validated raw file(s) are gone from the log: {named}{more}; "
        "their events would drop out of the counts unseen, so nothing was published: put the file back, "
        "or, if it was removed on purpose, record it: 'tally batch quarantine FILE --reason …' (then a "
        "fall in the views it held needs --allow-decrease)"
    )


def known_files(store_url: str) -> dict[str, ValidatedFile]:
    """The validated files the relational store records, less those in quarantine (it must be
    migrated)."""
    with open_store(store_url) as store:
        held = quarantined_files(store)
        return {path: f for path, f in validated_files(store).items() if path not in held}


def record(store_url: str, files: Iterable[ValidatedFile]) -> int:
    """Record files as validated (or refresh their record)."""
    with open_store(store_url) as store:
        return record_validated(store, files)


def _named(paths: list[str]) -> str:
    more = ", ..." if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


def require_validated_inputs(raw_dir: Path, store_url: str, cutoff_ms: int, run_id: str) -> InputCheck:
    """Raise `UnvalidatedInputs` if a file the run read is not validated with its current checksum
    (it appeared or changed after the run's raw validation, while the run computed)."""
    check = check_inputs(raw_dir, cutoff_ms, known_files(store_url))
    require_present(check, run_id)
    if check.restated:
        record(store_url, check.restated)
    if check.pending:
        paths = sorted(p.path for p in check.pending)
        raise UnvalidatedInputs(
            f"run {run_id!r} read {len(paths)} raw file(s) that are not validated with their current "
            f"checksum (they appeared or changed after its raw validation): {_named(paths)}; nothing "
            "was published: run the batch again, which validates them first"
        )
    return check
