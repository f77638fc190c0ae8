"""Raw log files merged into larger ones: each merged file's checksum and rows as validated, and the
file that holds its rows now, so the raw gate and the payout audit follow rows that moved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime

import sqlalchemy as sa

from warehouse import tables
from warehouse.connection import Store, as_utc, transaction, upsert
from warehouse.validated import ValidatedFile


@dataclass(frozen=True)
class CompactedFile:
    """A validated raw file whose rows were merged into `into_path` (relative paths under the raw
    directory): its sha256 and rows as validated, the merged file's sha256 when written, and when."""

    path: str
    sha256: str
    rows: int
    into_path: str
    into_sha256: str
    compacted_at: datetime


def compacted_files(store: Store) -> dict[str, CompactedFile]:
    """Every raw file merged into another, by its own (former) path."""
    with transaction(store) as connection:
        return {
            r.path: CompactedFile(
                path=r.path,
                sha256=r.sha256,
                rows=int(r.rows),
                into_path=r.into_path,
                into_sha256=r.into_sha256,
                compacted_at=as_utc(r.compacted_at),
            )
            for r in connection.execute(sa.select(tables.compacted_files))
        }


def record_compaction(store: Store, into: ValidatedFile, merged: Sequence[CompactedFile]) -> None:
    """In one transaction: `into` becomes a validated file, the `merged` files are recorded as held
    by it and are no longer validated files themselves, and files merged earlier into one of them
    now point at `into`."""
    rows = [{f.name: getattr(record, f.name) for f in fields(CompactedFile)} for record in merged]
    paths = [record.path for record in merged]
    table = tables.compacted_files
    with transaction(store) as connection:
        upsert(
            connection,
            tables.validated_files,
            [{f.name: getattr(into, f.name) for f in fields(ValidatedFile)}],
            ("path",),
        )
        connection.execute(
            sa.update(table)
            .where(table.c.into_path.in_(paths))
            .values(into_path=into.path, into_sha256=into.sha256)
        )
        upsert(connection, table, rows, ("path",))
        connection.execute(sa.delete(tables.validated_files).where(tables.validated_files.c.path.in_(paths)))
