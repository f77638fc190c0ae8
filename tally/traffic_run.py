"""Glue between the traffic generator, the ingest API and the batch cutoff for the CLI and demo."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from counting import redisconn, rules
from counting.settings import Settings
from counting.traffic import Generated, TrafficConfig, generate, write_traffic
from tally.loadgen import Sent, post_traffic
from tally.speedview import watermark


def generate_items(
    events: int, rate: float, seed: int, videos: int, bots: bool, start_ms: int | None = None
) -> list[Generated]:
    """Generated traffic starting now (event times near the wall clock), humans plus bots if asked."""
    config = TrafficConfig(
        seed=seed,
        videos=videos,
        viewers=max(200, events // 10),
        events=events,
        rate=rate,
        start_ms=start_ms if start_ms is not None else time.time_ns() // 1_000_000,
        bot_fraction=0.15 if bots else 0.0,
    )
    return list(generate(config))


def run_tagged(items: list[Generated], started_ms: int | None = None) -> list[Generated]:
    """The items with this run's tag (when it started, in hex ms) appended to their event ids: the
    generator's ids follow from the seed, so a second run with the same seed would otherwise be
    taken for copies of the first run's events and not counted. A retry within the run keeps the
    id of the event it copies."""
    at = started_ms if started_ms is not None else time.time_ns() // 1_000_000
    tag = f"-r{at:x}"
    return [replace(item, event={**item.event, "event_id": item.event["event_id"] + tag}) for item in items]


def write_jsonl(items: list[Generated], out: Path) -> Path:
    """Write the events and the ground truth beside them; return the ground truth's path."""
    from counting.traffic import truth_path

    out.parent.mkdir(parents=True, exist_ok=True)
    write_traffic(items, out)
    return truth_path(out)


def post_with_progress(items: list[Generated], ingest_url: str, collector_key: str, console: Console) -> Sent:
    """Post the items at their pace, with a progress bar on a terminal that goes away at the end
    (so that a refusal, raised as IngestRefused, is the last line)."""
    columns: list[Any] = [
        TextColumn("[bold]sending"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("events"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("send", total=len(items))
        return post_traffic(items, ingest_url, collector_key, on_progress=lambda n: progress.advance(task, n))


def closed_cutoff(settings: Settings) -> int:
    """The latest bucket edge at or below the archiver's watermark: the newest cutoff a batch may use."""
    client = redisconn.sync_client(settings)
    try:
        mark = watermark(client)
    finally:
        client.close()
    return rules.bucket_edge_at_or_before(mark, settings.bucket_ms)
