"""The archiver watermark on a real Redis: it waits for durable positions to reach sampled end
offsets, subtracts the grace, never goes back, and keeps moving on an idle topic."""

from __future__ import annotations

import uuid

import pytest
import redis
import redis.asyncio as aioredis

from counting import keys
from speed_layer.archiver.watermark import Watermark

pytestmark = pytest.mark.integration
GRACE = 1_000


class FakeBroker:
    """End offsets the test sets, and a clock it moves."""

    def __init__(self) -> None:
        self.ends = {0: 0, 1: 0}
        self.now_ms = 1_795_000_000_000

    def end_offsets(self) -> dict[int, int]:
        return dict(self.ends)

    def clock(self) -> float:
        return self.now_ms / 1000


@pytest.fixture
def fake_broker() -> FakeBroker:
    return FakeBroker()


@pytest.fixture
def watermark(aclient: aioredis.Redis, fake_broker: FakeBroker) -> Watermark:
    return Watermark(aclient, "events", GRACE, fake_broker.end_offsets, clock=fake_broker.clock)


async def test_waits_until_every_partition_has_reached_the_sampled_ends(
    watermark: Watermark, fake_broker: FakeBroker, redis_client: redis.Redis
) -> None:
    fake_broker.ends = {0: 5, 1: 3}
    sampled_at = fake_broker.now_ms
    assert await watermark.tick() is None
    await watermark.record_positions({0: 5})
    fake_broker.now_ms += 100
    fake_broker.ends = {0: 9, 1: 3}
    assert await watermark.tick() is None  # partition 1 is still behind
    await watermark.record_positions({1: 3})
    fake_broker.now_ms += 100
    assert await watermark.tick() == sampled_at - GRACE  # only the first sample is satisfied
    assert int(redis_client.get(keys.archiver_watermark()) or 0) == sampled_at - GRACE
    await watermark.record_positions({0: 9})
    fake_broker.now_ms += 100
    assert await watermark.tick() == fake_broker.now_ms - GRACE


async def test_an_idle_topic_keeps_the_watermark_moving_and_it_never_goes_back(
    watermark: Watermark, fake_broker: FakeBroker
) -> None:
    seen = []
    for _ in range(3):
        fake_broker.now_ms += 250
        seen.append(await watermark.tick())
    assert seen == [
        fake_broker.now_ms - 500 - GRACE,
        fake_broker.now_ms - 250 - GRACE,
        fake_broker.now_ms - GRACE,
    ]
    fake_broker.now_ms -= 10_000  # a clock step back
    assert await watermark.tick() == seen[-1]


async def test_positions_never_move_back(watermark: Watermark, redis_client: redis.Redis) -> None:
    await watermark.record_positions({0: 7})
    await watermark.record_positions({0: 4, 1: 2})
    assert await watermark.positions([0, 1, 2]) == {0: 7, 1: 2, 2: 0}
    assert redis_client.get(keys.archiver_position("events", 0)) == b"7"


@pytest.mark.integration
def test_the_end_of_a_partition_counts_every_record_of_a_write_of_several(broker: str) -> None:
    """The local broker reports a write of several records as ending after its first: the end the
    watermark samples must still count them all, or it would pass records not yet archived."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from speed_layer.archiver.watermark import BrokerEndOffsets

    topic = f"ends-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker, "acks": "all", "linger.ms": 50})
    for n in range(5):
        producer.produce(topic, f"record-{n}".encode())
    assert producer.flush(10) == 0
    plain = Consumer({"bootstrap.servers": broker, "group.id": "plain"})
    reported = plain.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    plain.close()

    ends = BrokerEndOffsets(broker, topic)
    try:
        assert ends() == {0: 5}
        producer.produce(topic, b"one more")
        assert producer.flush(10) == 0
        assert ends() == {0: 6}
    finally:
        ends.close()
    assert reported <= 5  # 1 on the local broker: why the end is read, not taken from it


@pytest.mark.slow
async def test_positions_and_the_watermark_on_a_redis_cluster(redis_cluster_url: str) -> None:
    """The partitions' positions lie in many slots of a cluster; each is set and read on its node."""
    client = aioredis.RedisCluster.from_url(redis_cluster_url)
    broker = FakeBroker()
    topic = f"events-{uuid.uuid4().hex[:8]}"
    broker.ends = {p: 3 for p in range(6)}
    watermark = Watermark(client, topic, GRACE, broker.end_offsets, clock=broker.clock)
    try:
        assert await watermark.tick() is None
        await watermark.record_positions({p: 3 for p in range(6)})
        await watermark.record_positions({0: 1})  # never back
        broker.now_ms += 100
        assert await watermark.positions(list(range(7))) == {**{p: 3 for p in range(6)}, 6: 0}
        assert await watermark.tick() == broker.now_ms - GRACE  # both samples are satisfied
        assert int(await client.get(keys.archiver_watermark()) or 0) == broker.now_ms - GRACE
        slots = {client.keyslot(keys.archiver_position(topic, p)) for p in range(6)}
        assert len({client.nodes_manager.get_node_from_slot(s).port for s in slots}) > 1
    finally:
        for name in [keys.archiver_watermark(), *(keys.archiver_position(topic, p) for p in range(6))]:
            await client.delete(name)
        await client.aclose()
