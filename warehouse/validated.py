"""Raw log files recorded as validated: their checksum and stat fields when they passed the
raw-log suite, so an unchanged file is not validated again."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime

import sqlalchemy as sa

from warehouse import tables
from warehouse.connection import Store, as_utc, transaction, upsert


@dataclass(frozen=True)
class ValidatedFile:
    """A raw log file that passed the raw-log suite: its path (relative to the raw directory), its
    sha256 then, the stat fields that tell whether it was rewritten since, its rows, and when and
    by which run it was validated."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int
    rows: int
    validated_at: datetime
    validated_by: str


def validated_files(store: Store) -> dict[str, ValidatedFile]:
    """Every raw file recorded as validated, by path."""
    with transaction(store) as connection:
        result = connection.execute(sa.select(tables.validated_files))
        return {
            r.path: ValidatedFile(
                path=r.path,
                sha256=r.sha256,
                size=int(r.size),
                mtime_ns=int(r.mtime_ns),
                ctime_ns=int(r.ctime_ns),
                rows=int(r.rows),
                validated_at=as_utc(r.validated_at),
                validated_by=r.validated_by,
            )
            for r in result
        }


def record_validated(store: Store, files: Iterable[ValidatedFile]) -> int:
    """Record (or update) raw files as validated with their checksum; returns how many."""
    records = [{f.name: getattr(record, f.name) for f in fields(ValidatedFile)} for record in files]
    with transaction(store) as connection:
        for start in range(0, len(records), 5_000):
            upsert(connection, tables.validated_files, records[start : start + 5_000], ("path",))
    return len(records)


def forget_log_files(store: Store) -> int:
    """Forget every validated, compacted and quarantined raw file (a log wiped to start empty:
    `tally up --reset`); returns how many records were dropped. A store not migrated yet has none."""
    with transaction(store) as connection:
        present = sa.inspect(connection)
        dropped = 0
        for table in (tables.validated_files, tables.compacted_files, tables.quarantined_files):
            if present.has_table(table.name):
                dropped += connection.execute(sa.delete(table)).rowcount or 0
        return dropped
