"""The atomic Redis write against a real Redis: parity with the oracle, bucket splits, replays."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis

from counting import keys, oracle, rules
from counting.settings import Settings
from speed_layer.counter import event_markers_key, plan_batch, window_viewers_key
from speed_layer.counter_worker import CounterWorker
from speed_layer.records import Record
from speed_layer.redis_writer import RedisWriter
from speed_layer.windows import ViewWindows
from tests.speed_layer.helpers import Traffic, no_dead_letters, pack, speed_counts

pytestmark = pytest.mark.integration


async def _count(
    settings: Settings, client: aioredis.Redis, records: list[Record], batch: int = 7
) -> CounterWorker:
    worker = CounterWorker(settings, client, no_dead_letters)
    for start in range(0, len(records), batch):
        await worker.handle(records[start : start + batch])
    return worker


async def test_counts_equal_the_oracle(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=1).mixed(n=600)
    expected = oracle.count(events)
    assert sum(c.repeat_views for c in expected.values()) > 0
    assert sum(c.short_views for c in expected.values()) > 0
    assert sum(c.rejected.get("scripted_agent", 0) for c in expected.values()) > 0
    assert len({e.event_id for e in events}) < len(events)  # retries present

    await _count(settings, aclient, pack(events, partitions=3))

    assert {video: speed_counts(redis_client, video) for video in expected} == expected
    assert {m.decode() for m in redis_client.smembers(keys.videos_index())} == set(expected)


async def test_every_bucket_edge_splits_like_the_oracle(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=2, step_ms=40).mixed(n=500)
    await _count(settings, aclient, pack(events, partitions=2))
    buckets = sorted({rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in events})
    assert len(buckets) >= 4
    for bucket in [*buckets, buckets[-1] + 1]:
        cutoff = bucket * settings.bucket_ms
        expected = oracle.count(events, cutoff=cutoff)
        actual = {video: speed_counts(redis_client, video, below_bucket=bucket) for video in expected}
        assert actual == expected, f"split at bucket {bucket}"


async def test_replaying_records_changes_nothing(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=3).mixed(n=300)
    records = pack(events, partitions=2)
    await _count(settings, aclient, records)
    before = {video: speed_counts(redis_client, video) for video in oracle.count(events)}

    # A restarted worker (fresh memory) sees every record again, cut into other batches.
    await _count(settings, aclient, records, batch=11)
    after = {video: speed_counts(redis_client, video) for video in before}
    assert after == before == oracle.count(events)


async def test_a_batch_is_skipped_whole_at_or_below_the_stored_offset(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=4).mixed(n=120)
    records = pack(events, partitions=1, per_record=10)
    writer = RedisWriter(aclient)
    plan = plan_batch(records, settings, ViewWindows(), now_ms=events[0].ingest_ts or 0)
    [first] = await writer.apply(plan.writes)
    assert (first.offset_before, first.offset_after, first.skipped) == (-1, records[-1].offset, 0)
    [again] = await writer.apply(plan.writes)
    assert (again.applied, again.skipped, again.offset_before) == (
        0,
        len(plan.writes[0].ops),
        records[-1].offset,
    )
    assert int(redis_client.get(keys.partition_offset("t", 0)) or -1) == records[-1].offset


async def test_records_above_the_stored_offset_still_count_after_a_partial_commit(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=5).mixed(n=200)
    records = pack(events, partitions=1, per_record=4)
    writer = RedisWriter(aclient)
    half = len(records) // 2
    await writer.apply(plan_batch(records[:half], settings, ViewWindows(), now_ms=0).writes)
    # The redelivered batch overlaps the committed half: only the rest is applied.
    [result] = await writer.apply(plan_batch(records, settings, ViewWindows(), now_ms=0).writes)
    assert result.offset_before == records[half - 1].offset
    assert result.skipped > 0
    assert {v: speed_counts(redis_client, v) for v in oracle.count(events)} == oracle.count(events)


async def test_a_large_plan_is_cut_into_several_atomic_writes(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=6).mixed(n=300)
    records = pack(events, partitions=1, per_record=3)
    plan = plan_batch(records, settings, ViewWindows(), now_ms=0, max_events=25)
    assert len(plan.writes) > 3
    assert [w.first_offset for w in plan.writes[1:]] == [w.last_offset + 1 for w in plan.writes[:-1]]
    await RedisWriter(aclient).apply(plan.writes)
    assert {v: speed_counts(redis_client, v) for v in oracle.count(events)} == oracle.count(events)


async def test_markers_expire_after_the_acceptance_horizon(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    traffic = Traffic(seed=8)
    view = traffic.view("vidx", "u1")
    now_ms = view.ingest_ts or 0
    await RedisWriter(aclient).apply(plan_batch(pack([view], 1), settings, ViewWindows(), now_ms).writes)
    day = view.ts // rules.DAY_MS
    window = rules.view_window_of(view.ts)
    horizon = 30 * rules.DAY_MS + rules.DAY_MS
    assert redis_client.hexists(event_markers_key("vidx", day), view.event_id)
    assert redis_client.hexists(window_viewers_key("vidx", window), "u1")
    assert redis_client.pexpiretime(event_markers_key("vidx", day)) == (day + 1) * rules.DAY_MS - 1 + horizon
    assert (
        redis_client.pexpiretime(window_viewers_key("vidx", window))
        == (window + 1) * rules.VIEW_WINDOW_MS - 1 + horizon
    )


async def test_every_bucket_sketch_marker_and_trending_key_expires(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=9, step_ms=30).mixed(n=600)
    # One worker over many small batches: later batches find the keys known and skip PEXPIREAT.
    await _count(settings, aclient, pack(events, partitions=2), batch=3)
    lasting = (":viewers", ":reactions", ":presence", ":buckets", ":shards", "tally:videos", "tally:offsets:")
    names = [k.decode() for k in redis_client.scan_iter(match="tally:*", count=1000)]
    expiring = [k for k in names if not any(part in k for part in lasting)]
    assert {k.split(":")[2] for k in expiring} >= {"b", "hll", "e", "w"}
    assert any(k.startswith(keys.trending(0).removesuffix("0")) for k in expiring)
    assert [k for k in expiring if redis_client.pttl(k) <= 0] == []
