"""The whole path on the real local stack: ingest API → broker → Faust → Redis, Faust → Parquet →
Spark → baseline, and the serving layer merging both, compared with the oracle at every step."""

from __future__ import annotations

import time

import httpx
import pytest
import redis

from counting import oracle
from counting.event import Event
from counting.settings import Settings
from tally.loadgen import Sent, post_traffic
from tally.speedview import counter_caught_up, wait_until, watermark
from tally.stack import Stack
from tally.traffic_run import generate_items
from warehouse.baseline import current_baseline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _send(settings: Settings, seed: int, events: int, bots: bool, rate: float = 1_500.0) -> Sent:
    items = generate_items(events=events, rate=rate, seed=seed, videos=25, bots=bots)
    return post_traffic(
        items, f"http://127.0.0.1:{settings.ingest_port}", settings.collector_key, batch_size=100
    )


def _served(settings: Settings, videos: list[str]) -> dict[str, tuple[int, int, int, int]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}") as api:
        answers = {v: api.get(f"/v1/videos/{v}/stats").json() for v in videos}
    return {v: (a["views"], a["likes"], a["dislikes"], a["unique_viewers"]) for v, a in answers.items()}


def _expected(events: list[Event], cutoff: int | None = None) -> dict[str, tuple[int, int, int, int]]:
    return {
        v: (c.views, c.likes, c.dislikes, c.unique_viewers) for v, c in oracle.count(events, cutoff).items()
    }


def _settle(settings: Settings, client: redis.Redis) -> None:
    wait_until(lambda: counter_caught_up(client, settings), 90, "the counter reaching the end of the log")


def _batch_at(settings: Settings, client: redis.Redis, cutoff: int) -> None:
    from batch_layer import run_batch

    wait_until(lambda: watermark(client) >= cutoff, 90, f"the archiver closing cutoff {cutoff}")
    run_batch(settings, cutoff)


def _edge_after(events: list[Event], bucket_ms: int) -> int:
    return (max(e.ingest_ts or 0 for e in events) // bucket_ms + 1) * bucket_ms


def test_served_counts_equal_the_oracle_across_batches(
    stack: Stack, stack_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = stack_settings
    first = _send(settings, seed=1, events=3_000, bots=False, rate=600.0)  # ~5 s: several buckets
    assert not first.refused
    _settle(settings, redis_client)
    expected = _expected(first.events)
    assert _served(settings, sorted(expected)) == expected

    stamps = sorted(e.ingest_ts or 0 for e in first.events)
    cutoff = (stamps[0] // settings.bucket_ms + 1) * settings.bucket_ms
    assert stamps[0] < cutoff <= stamps[-1], "the cutoff must split the first traffic"
    _batch_at(settings, redis_client, cutoff)
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None and baseline.cutoff == cutoff
    at_cutoff = _expected(first.events, cutoff)
    assert {
        v: (r.views, r.likes, r.dislikes, r.unique_viewers) for v, r in baseline.rows.items()
    } == at_cutoff
    assert _served(settings, sorted(expected)) == expected

    time.sleep(settings.bucket_ms / 1000)
    second = _send(settings, seed=2, events=2_000, bots=False)
    everything = first.events + second.events
    _settle(settings, redis_client)
    expected = _expected(everything)
    assert _served(settings, sorted(expected)) == expected

    third = _send(settings, seed=3, events=3_000, bots=True)
    assert set(third.labels) > {"human"}, "the third traffic must carry bots"
    everything += third.events
    final_cutoff = _edge_after(everything, settings.bucket_ms)
    _settle(settings, redis_client)
    _batch_at(settings, redis_client, final_cutoff)
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None and baseline.cutoff == final_cutoff
    truth = oracle.count(everything, final_cutoff)
    got = {
        v: (r.views, r.likes, r.dislikes, r.unique_viewers, r.short_views, r.repeat_views, r.rejected)
        for v, r in baseline.rows.items()
    }
    want = {
        v: (c.views, c.likes, c.dislikes, c.unique_viewers, c.short_views, c.repeat_views, c.rejected)
        for v, c in truth.items()
    }
    assert got == want
    assert sum(sum(c.rejected.values()) for c in truth.values()) > 0, "bots must have been rejected"
    expected = _expected(everything)
    assert _served(settings, sorted(expected)) == expected
