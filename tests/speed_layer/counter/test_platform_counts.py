"""The platform's per-bucket counts (the overview's source): what the real counter writes equals the
oracle's counts summed over every video, in whatever micro-batches the counter applies them."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from counting import oracle, rules
from counting.settings import Settings
from counting.traffic import TrafficConfig
from serving_layer.speed import platform_counts
from speed_layer.deadletter import DeadLetter
from tests.batch_layer.test_batch_payouts import traffic_events
from tests.writers import new_counter, writers


async def _no_dead_letters(letter: DeadLetter) -> None:
    raise AssertionError(f"no record is poison here: {letter}")


def test_platform_counts_are_the_sum_of_every_videos_counts(settings: Settings, redis_client: object) -> None:
    start = time.time_ns() // 1_000_000 - 120_000
    config = TrafficConfig(
        seed=3, videos=12, viewers=200, events=3_000, rate=50.0, bot_fraction=0.2, start_ms=start
    )
    events = traffic_events(config)
    with writers(settings) as tally:
        half = len(events) // 2
        tally.ingest(events[:half])
        tally.count()
        tally.ingest(events[half:])
        tally.count()
    stamps = [e.ingest_ts or 0 for e in events]
    first, last = (
        rules.bucket_of(min(stamps), settings.bucket_ms),
        rules.bucket_of(max(stamps), settings.bucket_ms),
    )

    async def read() -> dict[str, int]:
        client = aioredis.Redis.from_url(settings.redis_url)
        try:
            return await platform_counts(client, first, last)
        finally:
            await client.aclose()

    totals = asyncio.run(read())

    async def replay() -> None:  # a new owner reading the partitions again from their start
        client = aioredis.Redis.from_url(settings.redis_url)
        try:
            again = new_counter(settings, client, _no_dead_letters)
            await again.claim(settings.events_topic, list(range(settings.topic_partitions)))
            report = await again.handle(tally.records)
            assert report.skipped > 0 and report.applied == 0
        finally:
            await client.aclose()

    asyncio.run(replay())
    assert asyncio.run(read()) == totals, "a replayed record adds nothing"
    truth = oracle.count(events).values()
    expected = {
        "views": sum(c.views for c in truth),
        "likes": sum(c.likes for c in truth),
        "dislikes": sum(c.dislikes for c in truth),
        "short_views": sum(c.short_views for c in truth),
        "repeat_views": sum(c.repeat_views for c in truth),
    }
    for reason in {r for c in truth for r in c.rejected}:
        expected[f"rejected:{reason}"] = sum(c.rejected.get(reason, 0) for c in truth)
    expected["events"] = len(events)
    assert {k: v for k, v in totals.items() if v} == {k: v for k, v in expected.items() if v}
    assert expected["views"] > 0 and any(k.startswith("rejected:") for k in expected)
