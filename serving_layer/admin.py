"""The admin view of a video's raw traffic and of one event: what the log holds, and why the served
batch run refused or flagged a view."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from counting.logschema import EVENT_COLUMNS
from serving_layer.errors import StoreUnavailable
from warehouse.baseline import Baseline
from warehouse.connection import open_store
from warehouse.errors import StoreError
from warehouse.explanations import REFUSED, explanation_of, explanations_of_video
from warehouse.quarantine import quarantined_files

ACCEPTED = "accepted"  # judged by the served run: neither refused nor flagged
NOT_JUDGED = "not_judged"


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


def logged_event(raw_dir: Path, event_id: str) -> tuple[dict[str, Any] | None, int]:
    """The first copy of an event in the Parquet log (by ingestion) and how many copies it holds."""
    if not raw_dir.exists() or not any(raw_dir.rglob("*.parquet")):
        return None, 0
    dataset = ds.dataset(raw_dir, format="parquet", partitioning="hive")
    rows = dataset.to_table(columns=list(EVENT_COLUMNS), filter=ds.field("event_id") == event_id).to_pylist()
    if not rows:
        return None, 0
    first = min(rows, key=lambda r: (r["ingest_ts"] or 0, r["event_id"]))
    return {k: v for k, v in first.items() if v is not None}, len(rows)


def event_verdict(batch_dir: Path, baseline: Baseline | None, event: dict[str, Any]) -> dict[str, Any]:
    """What the served batch run made of a logged event: refused (with its score and signals),
    flagged, or neither; or why no run has judged it yet."""
    if baseline is None:
        return {"verdict": NOT_JUDGED, "why": "no batch run is published yet: run 'tally batch run'"}
    judged = {
        "batch_run_id": baseline.run_id,
        "batch_cutoff": baseline.cutoff,
        "rules_version": baseline.rules_version,
    }
    if event["ingest_ts"] >= baseline.cutoff:
        why = f"ingested after the served batch's cutoff ({baseline.cutoff}): the next batch run judges it"
        return {**judged, "verdict": NOT_JUDGED, "why": why}
    if event["type"] != "view":
        return {**judged, "verdict": NOT_JUDGED, "why": f"a {event['type']} event: the bot rules judge views"}
    try:
        found = explanation_of(batch_dir, baseline.run_id, event["event_id"])
    except FileNotFoundError:
        why = (
            f"batch run {baseline.run_id} kept no explanations (an earlier version's run): run a batch again"
        )
        return {**judged, "verdict": NOT_JUDGED, "why": why}
    if found is None:
        why = "no bot signal, or too few to flag it: counted, or a short or repeated view"
        return {**judged, "verdict": ACCEPTED, "score_below": "soft", "why": why}
    signals = " + ".join(found["signals"]) or "none"
    threshold = "reject" if found["verdict"] == REFUSED else "soft"
    why = (
        f"score {found['score']:g} from {signals} reached the {threshold} threshold "
        f"({found[f'{threshold}_score']:g})"
    )
    if found["reason"] is not None:
        why += f"; recorded reason: {found['reason']} (the heaviest signal)"
    return {
        **judged,
        "verdict": found["verdict"],
        "reason": found["reason"],
        "score": found["score"],
        "signals": found["signals"],
        "reject_score": found["reject_score"],
        "soft_score": found["soft_score"],
        "why": why,
    }


def video_explanations(
    batch_dir: Path, baseline: Baseline | None, video_id: str, limit: int
) -> dict[str, Any]:
    """The served batch run's latest `limit` refused or flagged views of a video with their scores
    and signals (`explained`, newest ingestion first)."""
    if baseline is None:
        return {"explained": {"batch_run_id": None, "views": []}}
    found = explanations_of_video(batch_dir, baseline.run_id, video_id)
    views = (
        [] if found is None else [{k: v for k, v in row.items() if v is not None} for row in found[:limit]]
    )
    return {
        "explained": {
            "batch_run_id": baseline.run_id,
            "batch_cutoff": baseline.cutoff,
            "kept": found is not None,
            "views": views,
        },
    }


def quarantine_list(store_url: str, released: bool) -> list[dict[str, Any]]:
    """The raw files in quarantine (and, with `released`, those put back), as the store records them."""
    try:
        with open_store(store_url) as store:
            if not sa.inspect(store.engine).has_table("quarantined_files"):
                return []
            found = quarantined_files(store, active_only=not released)
    except (SQLAlchemyError, StoreError) as exc:
        raise StoreUnavailable(
            f"the relational store is not readable ({exc}): set TALLY_DATABASE_URL"
        ) from exc
    return [{**q.__dict__, "active": q.active} for q in found.values()]


def quarantined_events(quarantine_dir: Path, video_id: str) -> dict[str, int]:
    """How many rows of the video the files in quarantine hold (left out of every run), in how many
    files."""
    files = sorted(quarantine_dir.rglob("*.parquet")) if quarantine_dir.is_dir() else []
    rows, holding = 0, 0
    for path in files:
        try:
            table = ds.dataset(path, format="parquet").to_table(
                columns=["video_id"], filter=ds.field("video_id") == video_id
            )
        except (OSError, ValueError):
            continue  # unreadable: likely why it is in quarantine; the list route names it
        rows += table.num_rows
        holding += table.num_rows > 0
    return {"files": holding, "rows": rows}
