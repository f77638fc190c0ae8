"""Batch runs in the store: their record (cutoff, rules, input files, publication) and status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from warehouse.connection import Store, as_utc, transaction, upsert
from warehouse.errors import StoreError
from warehouse.tables import batch_runs

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RUN_STATUSES: tuple[str, ...] = (RUNNING, SUCCEEDED, FAILED)
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RunRecord:
    """One batch run as the store keeps it. `input_files` maps each raw file read (relative to the
    raw directory) to its sha256. `published_at`: when readers were switched to its baseline (None:
    never, e.g. a backfill behind the served cutoff); `allow_decrease_reason`: why the operator let
    its views fall below the served ones; `skip_validation`: published without the quality gates;
    `forced`: published behind the served cutoff or with no event read; `excluded_files`: the raw
    files in quarantine when it read the log (path -> reason), which it left out; `corrections`: per
    video whose views fell below the served baseline's, the views the rules took back
    (`quality.corrections.taken_back`)."""

    run_id: str
    cutoff: int
    rules_version: str
    started_at: datetime
    status: str
    finished_at: datetime | None = None
    events_read: int | None = None
    input_files: dict[str, str] | None = None
    published_at: datetime | None = None
    allow_decrease_reason: str | None = None
    skip_validation: bool = False
    forced: bool = False
    excluded_files: dict[str, str] | None = None
    corrections: dict[str, Any] | None = None


def record_run(store: Store, run: RunRecord) -> None:
    """Insert or update the record of a batch run (keyed by run id)."""
    if run.status not in RUN_STATUSES:
        raise StoreError(f"run status must be one of {RUN_STATUSES} (got {run.status!r})")
    with transaction(store) as connection:
        upsert(connection, batch_runs, [run_values(run)], ("run_id",))


def run_values(run: RunRecord) -> dict[str, Any]:
    """The row of a run in `batch_runs`."""
    return {
        "run_id": run.run_id,
        "cutoff": run.cutoff,
        "rules_version": run.rules_version,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "events_read": run.events_read,
        "input_files": dict(sorted((run.input_files or {}).items())),
        "published_at": run.published_at,
        "allow_decrease_reason": run.allow_decrease_reason,
        "skip_validation": run.skip_validation,
        "forced": run.forced,
        "excluded_files": dict(sorted(run.excluded_files.items())) if run.excluded_files else None,
        "corrections": dict(sorted(run.corrections.items())) if run.corrections else None,
    }


def get_run(store: Store, run_id: str) -> RunRecord | None:
    with transaction(store) as connection:
        row = connection.execute(sa.select(batch_runs).where(batch_runs.c.run_id == run_id)).first()
    if row is None:
        return None
    return RunRecord(
        run_id=row.run_id,
        cutoff=int(row.cutoff),
        rules_version=row.rules_version,
        started_at=as_utc(row.started_at),
        finished_at=as_utc(row.finished_at) if row.finished_at is not None else None,
        status=row.status,
        events_read=row.events_read,
        input_files=dict(row.input_files or {}),
        published_at=as_utc(row.published_at) if row.published_at is not None else None,
        allow_decrease_reason=row.allow_decrease_reason,
        skip_validation=bool(row.skip_validation),
        forced=bool(row.forced),
        excluded_files=dict(row.excluded_files) if row.excluded_files else None,
        corrections=dict(row.corrections) if row.corrections else None,
    )


def run_recency(published_at: datetime | None, cutoff: int, started_at: datetime) -> tuple[Any, ...]:
    """How recent a run is for choosing the current ledger row: published runs after unpublished
    ones, by when they were published, then by cutoff and start."""
    published = as_utc(published_at) if published_at is not None else _NEVER
    return (published_at is not None, published, int(cutoff), as_utc(started_at))
