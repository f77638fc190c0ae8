"""The admin view of a video's raw traffic: what the log holds for it and why views were refused."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from counting.logschema import EVENT_COLUMNS


def is_admin(given: str | None, expected: str) -> bool:
    """Constant-time comparison of the presented admin key; an empty key admits no one."""
    return bool(expected) and given is not None and hmac.compare_digest(given.encode(), expected.encode())


def raw_events(raw_dir: Path, video_id: str, limit: int) -> dict[str, Any]:
    """The video's events in the Parquet log: totals by type (each event_id once) and the latest
    `limit` events, newest ingestion first."""
    if not raw_dir.exists() or not any(raw_dir.rglob("*.parquet")):
        return {"events_in_log": 0, "by_type": {}, "latest": []}
    dataset = ds.dataset(raw_dir, format="parquet", partitioning="hive")
    table = dataset.to_table(columns=list(EVENT_COLUMNS), filter=ds.field("video_id") == video_id)
    rows = table.to_pylist()
    first: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["ingest_ts"], r["event_id"])):
        first.setdefault(row["event_id"], row)
    by_type: dict[str, int] = {}
    for row in first.values():
        by_type[row["type"]] = by_type.get(row["type"], 0) + 1
    latest = sorted(rows, key=lambda r: (r["ingest_ts"], r["event_id"]), reverse=True)[:limit]
    return {
        "events_in_log": len(rows),
        "distinct_events": len(first),
        "retried_copies": len(rows) - len(first),
        "by_type": dict(sorted(by_type.items())),
        "latest": [{k: v for k, v in row.items() if v is not None} for row in latest],
    }
