"""Quarantine of raw log files: a file that fails the raw-log gate is moved out of the log with the
operator's reason, so runs go on without it (each run records what it left out), and moved back
when released, to be validated again like a new file: nothing unvalidated is ever published."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from counting.settings import Settings
from quality.errors import QuarantineRefused
from warehouse.migrate import migrate
from warehouse.quarantine import QuarantinedFile
from warehouse.store import open_store, quarantined_files, record_quarantine, validated_files
from warehouse.tables import file_digest


def log_path(settings: Settings, given: str | Path) -> str:
    """A raw file's path relative to the raw directory, from that relative path or a full one;
    refused when it lies outside the log."""
    path = Path(given)
    raw = settings.raw_dir.resolve()
    if path.is_absolute():
        try:
            return path.resolve().relative_to(raw).as_posix()
        except ValueError:
            raise QuarantineRefused(
                f"{str(given)!r} is not a file of the raw log at {raw}: give its path under it "
                "(as the failed validation names it, e.g. ingest_date=…/ingest_hour=…/….parquet)"
            ) from None
    if ".." in path.parts:
        raise QuarantineRefused(f"a log path may not climb out of the log with '..' (got {str(given)!r})")
    return path.as_posix()


def _rows(path: Path) -> int:
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (OSError, pa.ArrowException):
        return 0  # unreadable: the reason it is quarantined


def quarantine(settings: Settings, given: str | Path, reason: str) -> QuarantinedFile:
    """Move a raw file out of the log into the quarantine directory and record why: runs read the
    log without it from then on (and record that they did). A validated file already gone from the
    log (removed on purpose) is recorded as left out, so runs stop refusing its absence."""
    reason = reason.strip()
    if not reason:
        raise QuarantineRefused("say why the file is quarantined (got an empty --reason)")
    relative = log_path(settings, given)
    source, target = settings.raw_dir / relative, settings.quarantine_dir / relative
    migrate(settings.store_url)
    if not source.is_file():
        return _record_gone(settings, relative, reason, held=target.is_file())
    record = QuarantinedFile(
        path=relative,
        sha256=file_digest(source),
        rows=_rows(source),
        reason=reason,
        quarantined_at=datetime.now(UTC),
    )
    with open_store(settings.store_url) as store:
        record_quarantine(store, record)  # first: a crash before the move leaves it recorded, in place
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    return record


def _record_gone(settings: Settings, relative: str, reason: str, held: bool) -> QuarantinedFile:
    """Record a validated file that is gone from the log (removed on purpose) as left out."""
    with open_store(settings.store_url) as store:
        validated = validated_files(store).get(relative)
        if validated is None or held:
            already = " (it is in quarantine already)" if held else ""
            raise QuarantineRefused(f"no raw file {relative!r} under {settings.raw_dir}{already}")
        record = QuarantinedFile(
            path=relative,
            sha256=validated.sha256,
            rows=validated.rows,
            reason=reason,
            quarantined_at=datetime.now(UTC),
        )
        record_quarantine(store, record)
    return record


def release(settings: Settings, given: str | Path, reason: str) -> QuarantinedFile:
    """Move a quarantined file (as it is now in the quarantine directory, repaired or not) back into
    the log: the next run validates it before reading it, as any new file."""
    reason = reason.strip()
    if not reason:
        raise QuarantineRefused("say why the file is released (got an empty --reason)")
    relative = log_path(settings, given)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        record = quarantined_files(store).get(relative)
    source, target = settings.quarantine_dir / relative, settings.raw_dir / relative
    if record is None:
        raise QuarantineRefused(
            f"{relative!r} is not in quarantine: 'tally batch quarantined' lists the files that are"
        )
    if source.is_file():
        if target.exists():
            raise QuarantineRefused(
                f"the log holds {relative!r} again: move one of the two copies away first"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
    elif not target.is_file():
        raise QuarantineRefused(
            f"{relative!r} was recorded gone from the log: put the file back under {settings.raw_dir} "
            "first, then release it"
        )
    released = replace(record, released_at=datetime.now(UTC), release_reason=reason)
    with open_store(settings.store_url) as store:
        record_quarantine(store, released)
    return released


def in_quarantine(settings: Settings) -> dict[str, QuarantinedFile]:
    """The files in quarantine now, by path (the store is migrated first)."""
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        return quarantined_files(store)
