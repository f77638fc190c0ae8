"""The publisher spreads a hot video's events over partitions by viewer, using the shard counts the
speed layer keeps in Redis, and publishes on one shard when Redis does not answer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from counting.event import Event
from counting.settings import Settings
from counting.values import ShardPlan
from counting.wire import decode_events, partition_for, record_key
from ingest.publisher import ONE_SHARD, Publisher, ShardPlans, records_of, shard_for, shard_of
from tally.services import free_port
from tally.topics import ensure_topics
from tests.writers import heat

pytestmark = pytest.mark.integration

HOT_EVENTS_PER_SEC = 10  # the velocity above which the tests' speed layer shards a video


def _event(i: int, video: str, user: str | None) -> Event:
    return Event(
        event_id=f"p{i}",
        type="view",
        video_id=video,
        ts=time.time_ns() // 1_000_000,
        user_id=user,
        session_id=f"s-{user}",
        watch_secs=40.0,
    )


def _read(settings: Settings, expected: int) -> list[tuple[int, Event]]:
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(settings.events_topic, p, 0) for p in range(settings.topic_partitions)])
    found: list[tuple[int, Event]] = []
    deadline = time.monotonic() + 15
    while len(found) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found.extend((message.partition(), e) for e in decode_events(message.value()))
    consumer.close()
    return found


def test_records_hold_each_partitions_events_in_order_keyed_by_video_or_shard() -> None:
    stamped_at = time.time_ns() // 1_000_000
    events = [
        msgspec.structs.replace(_event(i, video, f"u{i % 7}"), ingest_ts=stamped_at)
        for i, video in enumerate(["a", "b", "hot", "a", "c", "hot", "b", "hot"] * 5)
    ]
    plans = {"hot": ShardPlan(4, 0)}

    records = records_of(events, plans, 3)

    assert [p for p, _, _ in records] == sorted({p for p, _, _ in records})  # one record a partition
    unpacked = [(p, key, decode_events(value)) for p, key, value in records]
    assert sorted(e.event_id for _, _, batch in unpacked for e in batch) == sorted(e.event_id for e in events)
    for partition, key, batch in unpacked:
        assert [e.event_id for e in batch] == [e.event_id for e in events if e in batch]  # their order
        for event in batch:
            own = record_key(event.video_id, shard_for(event, plans.get(event.video_id, ONE_SHARD)))
            assert partition_for(own, 3) == partition
        first = batch[0]
        assert key == record_key(first.video_id, shard_for(first, plans.get(first.video_id, ONE_SHARD)))
    assert len({shard_for(e, plans["hot"]) for e in events if e.video_id == "hot"}) > 1


def test_a_viewers_events_always_get_the_same_shard() -> None:
    view = _event(1, "v", "someone")
    assert {shard_of(view, 8) for _ in range(3)} == {shard_of(_event(2, "v", "someone"), 8)}
    assert shard_of(view, 1) == 0
    assert len({shard_of(_event(i, "v", f"u{i}"), 8) for i in range(200)}) == 8


def _presence(type_: str, user: str | None, session: str) -> Event:
    return Event(event_id=f"{type_}-{user}", type=type_, video_id="v", ts=1, user_id=user, session_id=session)


def test_a_sessions_heartbeats_and_leave_get_one_shard_whoever_its_viewer_is() -> None:
    """Presence routes by the session: a login mid-session does not move it to another shard."""
    for n in range(50):
        kinds = [(t, u) for t in ("heartbeat", "leave") for u in (None, f"m{n}")]
        assert len({shard_of(_presence(t, u, f"tab{n}"), 8) for t, u in kinds}) == 1, n
    assert len({shard_of(_presence("heartbeat", None, f"tab{n}"), 8) for n in range(200)}) == 8
    # views still go by their viewer: a user's views share a shard whatever their session
    views = [msgspec.structs.replace(_event(i, "v", "someone"), session_id=f"tab{i}") for i in range(10)]
    assert len({shard_of(view, 8) for view in views}) == 1


async def test_a_hot_videos_events_spread_over_partitions_by_viewer(
    settings: Settings, broker: str, redis_client: redis.Redis
) -> None:
    configured = settings.model_copy(
        update={
            "kafka_bootstrap": broker,
            "topic_partitions": 4,
            "hot_video_events_per_sec": HOT_EVENTS_PER_SEC,
            "max_video_shards": 8,
        }
    )
    ensure_topics(configured)
    # Hot traffic through the real counter (the writers run their own event loop): it plans 8
    # shards from a notice ahead; the events below are ingested once the plan holds.
    plan = await asyncio.to_thread(heat, configured, "hot")
    assert plan.shards == 8
    await asyncio.sleep(max(0.0, plan.active_from / 1000 - time.time()) + 0.05)
    publisher = Publisher(configured)
    await publisher.start()
    try:
        events = [_event(i, "hot", f"u{i % 40}") for i in range(200)] + [_event(900, "cold", "u1")]
        await publisher.publish(events)
    finally:
        await publisher.stop()
    written = _read(configured, len(events))
    assert len(written) == len(events)
    hot = [(p, e) for p, e in written if e.video_id == "hot"]
    assert len({p for p, _ in hot}) > 1
    partitions_of: dict[str | None, set[int]] = {}
    for partition, event in hot:
        partitions_of.setdefault(event.user_id, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of.values())
    [(cold_partition, _)] = [(p, e) for p, e in written if e.video_id == "cold"]
    assert cold_partition == partition_for(record_key("cold"), 4)


async def test_without_redis_every_video_has_one_shard() -> None:
    away = redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    tried = []
    real_read = away.hgetall

    async def hgetall(name: str) -> Any:
        tried.append(name)
        return await real_read(name)

    away.hgetall = hgetall  # type: ignore[method-assign]
    plans = ShardPlans(away)
    assert (await plans.current()).get("a", ONE_SHARD) == ShardPlan(1)
    assert (await plans.current()).get("b", ONE_SHARD) == ShardPlan(1)
    assert len(tried) == 1  # backing off: no second attempt
    await plans.close()
