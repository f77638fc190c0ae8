"""The batch's history tiers (1-minute and 1-hour steps of ingestion time) against the oracle."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from counting import oracle, rules
from counting.batchpaths import HOUR, MINUTE, TIERS, tier_path
from counting.event import Event
from counting.settings import Settings
from tests.serving_layer.conftest import SCRIPTED, Events
from tests.writers import writers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# 20-minute buckets: the hour tier adds up three buckets of the kept grain, the minute tier (finer
# than a bucket) is counted from the classified views: both ways in one run.
BUCKET_MS = 20 * rules.MINUTE_MS


def _events(cutoff: int) -> list[Event]:
    """Two videos over the three hours before the cutoff, and views after it (not in the run)."""
    e = Events(rules.MINUTE_MS, prefix="tier")  # each event in a chosen minute of ingestion time
    c = cutoff // rules.MINUTE_MS
    window = (c - 95) * rules.MINUTE_MS // rules.VIEW_WINDOW_MS * rules.VIEW_WINDOW_MS
    return [
        *e.views("a", c - 170, "u0", "u1"),
        e.view("a", c - 170, "bot0", user_agent=SCRIPTED),
        e.view("a", c - 95, "u2", ts=window),
        *e.views("a", c - 95, "u3", "u4"),
        e.view("a", c - 95, "u5", watch=10.0),
        e.view("a", c - 94, "u2", ts=window + 1),  # a repeat of its 30-minute window: in no count
        # watched 40 minutes before it was ingested: counted in the step of its ingestion
        e.view("a", c - 61, "u6", ts=(c - 61) * rules.MINUTE_MS - 40 * rules.MINUTE_MS),
        *e.views("a", c - 60, "u7", "u8"),
        *e.views("a", c - 1, "u9"),
        e.view("a", c - 1, "bot1", user_agent=SCRIPTED),
        *e.views("b", c - 61, "w0", "w1"),
        e.view("b", c - 2, "w2", watch=5.0),
        *e.views("a", c, "late0", "late1"),  # ingested at the cutoff: the next run's
        e.view("b", c, "late2"),
    ]


def _oracle_steps(events: list[Event], cutoff: int, step_ms: int) -> dict[tuple[str, int], tuple[int, ...]]:
    """Per (video, step start): counted views (`oracle.counted_views`), rejected and short views
    (`oracle.view_outcomes`) of the events ingested before the cutoff, by ingestion time."""

    def step(event: Event) -> tuple[str, int]:
        return event.video_id, (event.ingest_ts or 0) // step_ms * step_ms

    views = Counter(step(e) for e in oracle.counted_views(events, cutoff))
    outcomes = oracle.view_outcomes(oracle.dedup(events, cutoff))
    rejected = Counter(step(e) for e, outcome, _ in outcomes if outcome == oracle.REJECTED)
    short = Counter(step(e) for e, outcome, _ in outcomes if outcome == oracle.SHORT)
    judged = {step(e) for e, _, _ in outcomes}
    return {key: (views[key], rejected[key], short[key]) for key in judged}


def test_the_tiers_count_each_view_in_the_step_of_its_ingestion(
    settings: Settings, spark: SparkSession
) -> None:
    settings = settings.model_copy(update={"bucket_ms": BUCKET_MS})
    now = time.time_ns() // 1_000_000
    cutoff = (now - settings.delivery_timeout_ms - 2_000) // BUCKET_MS * BUCKET_MS  # closed at once
    events = _events(cutoff)
    with writers(settings, spark=lambda: spark) as tally:
        tally.ingest(events)
        tally.archive()
        run = tally.batch(cutoff, publish=False)

    for tier in TIERS:
        table = pq.read_table(tier_path(settings, run.run_id, tier))
        assert table.column_names == ["video_id", "start_ms", "views", "rejected", "short_views"]
        rows = table.to_pylist()
        keys_in_file = [(r["video_id"], r["start_ms"]) for r in rows]
        assert keys_in_file == sorted(set(keys_in_file)), tier  # one row per (video, step), in order
        got = {(r["video_id"], r["start_ms"]): (r["views"], r["rejected"], r["short_views"]) for r in rows}
        assert got == _oracle_steps(events, cutoff, tier.step_ms), tier

    minutes = pq.read_table(tier_path(settings, run.run_id, MINUTE)).to_pylist()
    hours = pq.read_table(tier_path(settings, run.run_id, HOUR)).to_pylist()
    assert sum(r["views"] for r in minutes) == sum(r["views"] for r in hours) == 11
    late = (cutoff // rules.MINUTE_MS - 61) * rules.MINUTE_MS
    assert next(r["views"] for r in minutes if r["video_id"] == "a" and r["start_ms"] == late) == 1
