"""The speed layer at scale against a real Redis: one video's storm over several partitions and
workers, unique viewers (exact sets, then sketches), trending."""

from __future__ import annotations

import random

import pytest
import redis
import redis.asyncio as aioredis

from counting import keys, oracle, rules
from counting.event import Event
from counting.settings import Settings
from counting.wire import encode_events
from serving_layer.merge import merge
from serving_layer.speed import read_speed, top_videos, unique_viewers_between
from speed_layer.counter.handoff import home_of
from speed_layer.records import Record
from speed_layer.state.partition import EXACT_VIEWERS_LIMIT
from tests.speed_layer.helpers import Traffic, no_dead_letters, pack, speed_counts
from tests.writers import new_counter
from warehouse.baseline import BaselineRow

pytestmark = pytest.mark.integration


async def test_one_videos_storm_over_several_partitions_and_workers_equals_the_oracle(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=31, step_ms=15).clean(videos=1, n=3_000)
    records = pack(events, partitions=4, per_record=20, shards=8)
    assert len({r.partition for r in records}) == 4
    # The traffic starts sharded, as if the video's home had handed its viewers over already
    # (speed_layer/counter/handoff.py). Three workers own the partitions, in an arbitrary interleaving of
    # micro-batches.
    redis_client.set(keys.handoff_closed("vid0"), "1")
    owners = {0: 0, 1: 1, 2: 2, 3: 2}
    workers = [new_counter(settings, aclient, no_dead_letters) for _ in range(3)]
    queues = {p: [r for r in records if r.partition == p] for p in range(4)}
    rng = random.Random(3)
    while any(queues.values()):
        partition = rng.choice([p for p, q in queues.items() if q])
        take = rng.randint(1, 6)
        batch, queues[partition] = queues[partition][:take], queues[partition][take:]
        await workers[owners[partition]].handle(batch)

    expected = oracle.count(events)
    assert expected["vid0"].repeat_views > 0 and expected["vid0"].likes > 0
    assert {"vid0": speed_counts(redis_client, "vid0")} == expected
    buckets = sorted({rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in events})
    for bucket in buckets[1:]:
        expected = oracle.count(events, cutoff=bucket * settings.bucket_ms)
        assert {"vid0": speed_counts(redis_client, "vid0", below_bucket=bucket)} == expected


async def test_trending_ranks_videos_by_counted_views_over_a_window(
    settings: Settings, aclient: aioredis.Redis
) -> None:
    traffic = Traffic(seed=33, step_ms=0)
    ts = traffic.clock
    events = [traffic.view("a", f"u{i}", ts=ts) for i in range(5)]
    events += [traffic.view("b", f"u{i}", ts=ts) for i in range(3)]
    events += [
        traffic.view("c", "u1", watch=3.0),
        traffic.view("b", "u0", ts=ts),
    ]  # short view, window repeat
    bucket = rules.bucket_of(events[0].ingest_ts or 0, settings.bucket_ms)
    traffic.clock = (bucket + 2) * settings.bucket_ms
    later = [traffic.view("c", f"w{i}") for i in range(9)]
    worker = new_counter(settings, aclient, no_dead_letters)
    await worker.handle(pack(events + later, settings.topic_partitions, settings.events_topic))

    assert await top_videos(aclient, bucket, bucket, 10) == [("a", 5), ("b", 3)]
    assert await top_videos(aclient, bucket, bucket + 2, 2) == [("c", 9), ("a", 5)]
    assert await top_videos(aclient, bucket + 3, bucket + 9, 5) == []
    ttl = await aclient.pttl(keys.trending(bucket))
    assert 0 < ttl <= settings.retention_ms + 2 * settings.bucket_ms


async def test_unique_viewers_are_exact_then_sketched_past_the_limit_and_merge_without_double_counting(
    settings: Settings, aclient: aioredis.Redis
) -> None:
    topic, home = settings.events_topic, home_of("v", settings.topic_partitions)
    traffic = Traffic(seed=34, step_ms=0)
    before = [traffic.view("v", f"u{i}", ts=traffic.clock - 3_600_000) for i in range(50)]
    traffic.clock += 2 * settings.bucket_ms
    after = [traffic.view("v", f"u{i}", ts=traffic.clock) for i in range(30, 80)]  # 20 seen before too
    cutoff_bucket = rules.bucket_of(after[0].ingest_ts or 0, settings.bucket_ms)
    worker = new_counter(settings, aclient, no_dead_letters)
    await worker.handle(
        [Record(topic, home, 0, encode_events(before)), Record(topic, home, 1, encode_events(after))]
    )

    baseline = BaselineRow("v", views=50, unique_viewers=50)
    speed = await read_speed(aclient, "v", cutoff_bucket, 0)
    merged = merge("v", baseline, speed)
    assert (merged.unique_viewers, merged.approx) == (80, False)
    assert await unique_viewers_between(aclient, "v", cutoff_bucket, cutoff_bucket) == 50

    many = [traffic.view("v", f"m{i}") for i in range(EXACT_VIEWERS_LIMIT)]
    await worker.handle([Record(topic, home, 2, encode_events(many))])
    assert await aclient.type(keys.viewers("v")) == b"string"
    speed = await read_speed(aclient, "v", cutoff_bucket, 0)
    merged = merge("v", baseline, speed)
    exact = 80 + EXACT_VIEWERS_LIMIT
    assert merged.approx
    assert abs(merged.unique_viewers - exact) <= 0.02 * exact


@pytest.mark.slow
async def test_a_million_distinct_viewers_are_served_within_two_percent(
    settings: Settings, aclient: aioredis.Redis
) -> None:
    n = 1_000_000
    ingest_ts = Traffic(seed=35).clock
    per_record = 2_000
    worker = new_counter(settings, aclient, no_dead_letters)
    offset = 0
    for start in range(0, n, 50_000):
        records = []
        for first in range(start, start + 50_000, per_record):
            events = [
                Event(
                    event_id=f"m{i}",
                    type="view",
                    video_id="viral",
                    ts=ingest_ts - 1_000,
                    user_id=f"viewer-{i}",
                    session_id=f"s{i}",
                    watch_secs=60.0,
                    ingest_ts=ingest_ts,
                )
                for i in range(first, first + per_record)
            ]
            records.append(Record("t", 0, offset, encode_events(events)))
            offset += 1
        report = await worker.handle(records)
        assert report.applied == 50_000
    speed = await read_speed(aclient, "viral", 0, 0)
    merged = merge("viral", None, speed)
    assert merged.approx and speed.views == n
    assert abs(merged.unique_viewers - n) <= 0.02 * n, merged.unique_viewers
