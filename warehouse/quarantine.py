"""Raw log files in quarantine: taken out of the log after failing its gate, with the operator's
reason, until released; every record is kept (a release stamps it, never deletes it)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

import sqlalchemy as sa

from warehouse import tables
from warehouse.connection import Store, as_utc, transaction, upsert


@dataclass(frozen=True)
class QuarantinedFile:
    """A raw file taken out of the log: its path (relative to the raw directory), its sha256 and
    rows then, why and when; `released_at` once it went back (with the operator's words)."""

    path: str
    sha256: str
    rows: int
    reason: str
    quarantined_at: datetime
    released_at: datetime | None = None
    release_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.released_at is None


def quarantined_files(store: Store, active_only: bool = True) -> dict[str, QuarantinedFile]:
    """The files in quarantine (with `active_only` False, the released ones too), by path."""
    query = sa.select(tables.quarantined_files).order_by(tables.quarantined_files.c.path)
    if active_only:
        query = query.where(tables.quarantined_files.c.released_at.is_(None))
    with transaction(store) as connection:
        return {
            r.path: QuarantinedFile(
                path=r.path,
                sha256=r.sha256,
                rows=int(r.rows),
                reason=r.reason,
                quarantined_at=as_utc(r.quarantined_at),
                released_at=as_utc(r.released_at) if r.released_at is not None else None,
                release_reason=r.release_reason,
            )
            for r in connection.execute(query)
        }


def record_quarantine(store: Store, record: QuarantinedFile) -> None:
    """Record a file's quarantine, or its release (keyed by path: quarantined again, it is one row)."""
    values = {f.name: getattr(record, f.name) for f in fields(QuarantinedFile)}
    with transaction(store) as connection:
        upsert(connection, tables.quarantined_files, [values], ("path",))
