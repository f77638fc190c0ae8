"""The ground truth of generated traffic: what each label sent, and the JSONL file of the events
with its truth beside it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec

from counting.traffic_config import HUMAN, Generated, TrafficConfig


def ground_truth(items: Iterable[Generated]) -> dict[str, Any]:
    """What the traffic holds: per label its events (retries included), distinct views and retries."""
    labels: dict[str, dict[str, int]] = {}
    totals = {"events": 0, "retries": 0, "late_events": 0}
    for item in items:
        counts = labels.setdefault(item.label, {"events": 0, "views": 0, "retries": 0})
        counts["events"] += 1
        totals["events"] += 1
        totals["late_events"] += item.late
        if item.retry:
            counts["retries"] += 1
            totals["retries"] += 1
        elif item.event["type"] == "view":
            counts["views"] += 1
    return {**totals, "labels": dict(sorted(labels.items()))}


def truth_path(events_path: Path) -> Path:
    """The ground-truth JSON beside an events JSONL file: `name.jsonl` → `name.truth.json`."""
    return events_path.with_name(events_path.name.removesuffix(".jsonl") + ".truth.json")


def write_traffic(
    items: Iterable[Generated], path: Path, config: TrafficConfig | None = None
) -> dict[str, Any]:
    """Write the events as JSONL at `path` and the ground truth beside it (with the event ids of
    each bot kind); return the ground truth."""
    encoder = msgspec.json.Encoder()
    kept: list[Generated] = []
    bot_ids: dict[str, list[str]] = {}
    with path.open("wb") as out:
        for item in items:
            out.write(encoder.encode(item.event) + b"\n")
            kept.append(Generated({"type": item.event["type"]}, item.label, 0, item.retry, item.late))
            if item.label != HUMAN and not item.retry:
                bot_ids.setdefault(item.label, []).append(item.event["event_id"])
    truth = ground_truth(kept)
    truth["bot_event_ids"] = bot_ids
    if config is not None:
        truth["config"] = asdict(config)
    truth_path(path).write_bytes(msgspec.json.format(encoder.encode(truth)))
    return truth
