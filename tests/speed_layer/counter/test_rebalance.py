"""A rebalance mid-stream with the counter's state in the worker, on a real broker: a second counter
joins while records are in flight, then leaves while records are in flight; the counts equal the
oracle, the partitions that moved were claimed by each new owner in turn, and their old owners'
commits are refused (fenced out); on a single Redis and on a Redis Cluster."""

from __future__ import annotations

import asyncio

import pytest
import redis

from counting import keys, oracle
from counting.event import Event
from counting.redisconn import async_client
from counting.settings import Settings
from speed_layer.state.partition_store import FENCED, PartitionStore
from tally.topics import ensure_topics
from tests.speed_layer.counter.test_crash import SESSION, StartWorker, _stored
from tests.speed_layer.helpers import OnRedis, Traffic, produce_events, speed_counts, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4


def _generations(client: redis.Redis, settings: Settings) -> dict[int, int]:
    topic = settings.events_topic
    return {p: int(client.get(keys.counter_owner(topic, p)) or 0) for p in range(PARTITIONS)}


async def _commit_as(settings: Settings, partition: int, generation: int) -> int:
    """Try a commit of an empty entry as the owner of `generation` would; answer its status."""
    client = async_client(settings)
    try:
        store = PartitionStore(client, settings.events_topic)
        [(status, _, _)] = await store.commit([(partition, generation, 10**9, b"\x80", b"\x80", False, None)])
        return status
    finally:
        await client.aclose()


def test_a_counter_joining_then_leaving_mid_stream_counts_exactly_once(
    settings: Settings, broker: str, on_redis: OnRedis, start_worker: StartWorker
) -> None:
    redis_client = on_redis.client
    settings = on_redis.apply(settings).model_copy(
        update={
            "kafka_bootstrap": broker,
            "topic_partitions": PARTITIONS,
            "counter_flush_ms": 50,
        }
    )
    ensure_topics(settings)
    traffic = Traffic(seed=51, step_ms=2)
    events: list[Event] = []
    records = 0

    def send(n: int) -> None:
        nonlocal records
        chunk = traffic.clean(videos=8, n=n)
        events.extend(chunk)
        records += sum(produce_events(settings.kafka_bootstrap, settings, chunk, per_record=3).values())

    first = start_worker("counter", settings, *SESSION)
    send(1_500)
    wait_until(lambda: _stored(redis_client, settings) > 0, 90, "the first counter counting", first)
    assert set(_generations(redis_client, settings).values()) == {1}

    second = start_worker("counter", settings, *SESSION, "--instance", "2")
    send(1_500)  # in flight while the second counter joins
    wait_until(
        lambda: 2 in _generations(redis_client, settings).values(), 90, "the second counter claiming", second
    )
    joined = _generations(redis_client, settings)
    moved = sorted(p for p, g in joined.items() if g == 2)
    assert moved and len(moved) < PARTITIONS, joined  # each counter owns some partitions
    send(1_500)
    wait_until(lambda: _stored(redis_client, settings) >= records, 90, "both counters catching up", second)

    send(1_500)
    assert second.stop() == 0  # it leaves with records of its partitions in flight
    wait_until(
        lambda: all(_generations(redis_client, settings)[p] == 3 for p in moved),
        90,
        "the first counter claiming the partitions back",
        first,
    )
    send(500)
    wait_until(lambda: _stored(redis_client, settings) >= records, 90, "the first counter catching up", first)

    expected = oracle.count(events)
    assert {video: speed_counts(redis_client, video) for video in expected} == expected
    for partition in moved:  # neither earlier owner of a moved partition can commit any more
        for generation in (1, 2):
            assert asyncio.run(_commit_as(settings, partition, generation)) == FENCED
    assert first.stop() == 0
