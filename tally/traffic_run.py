"""Glue between the traffic generator, the ingest API and the batch cutoff for the CLI and demo."""

from __future__ import annotations

import time
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
