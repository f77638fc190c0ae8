"""The archiver watermark: the ingestion time below which every event is durably in the Parquet log.

Every tick samples the topic's end offsets at wall time t. Once the archivers' durable positions
(kept per partition in Redis, so several archiver workers combine) have reached a sample's end
offsets on every partition, every event stamped before t - grace (the producer's delivery timeout)
is in the log, and the watermark moves to max(old, t - grace). An idle topic keeps advancing it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import redis.asyncio as aioredis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from counting import keys

# Keep at most this many unsatisfied samples (dropping the oldest only delays the watermark).
MAX_SAMPLES = 10_000

_SET_MAX = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
local proposed = tonumber(ARGV[1])
if proposed > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return tostring(current)
"""

EndOffsets = Callable[[], dict[int, int]]


def end_reader(bootstrap: str, group: str) -> Consumer:
    """A consumer for `read_end` (it needs the broker to signal a partition's end)."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def read_end(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> int:
    """The end offset of a partition (the offset its next record will get). The high watermark is
    checked by reading from its last record to the end the broker signals: the local Tansu broker
    reports a write of several records as ending after the first of them (5 records written at
    once at offsets 0-4 report an end of 1), which would let the archiver watermark pass records not
    yet archived. On Kafka the read finds the end at once."""
    _, high = consumer.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=timeout_s, cached=False
    )
    if high <= 0:
        return high
    consumer.assign([TopicPartition(topic, partition, high - 1)])
    end = high
    while True:
        record = consumer.poll(timeout_s)
        if record is None:  # the broker did not say: what it reported is all we know
            return end
        error = record.error()
        offset = record.offset()
        if error is None:
            end = max(end, (offset if offset is not None else end - 1) + 1)
        elif error.code() == KafkaError._PARTITION_EOF:
            return max(end, offset if offset is not None else end)


class BrokerEndOffsets:
    """Reads a topic's end offsets (the offset the next record will get) from the broker; blocking."""

    def __init__(self, bootstrap: str, topic: str, timeout_s: float = 10.0) -> None:
        self.topic = topic
        self._timeout = timeout_s
        self._consumer = end_reader(bootstrap, f"tally-watermark-{topic}")

    def __call__(self) -> dict[int, int]:
        metadata = self._consumer.list_topics(self.topic, timeout=self._timeout)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            raise LookupError(
                f"topic {self.topic!r} not found on the broker ({topic.error if topic else None})"
            )
        return {p: read_end(self._consumer, self.topic, p, self._timeout) for p in topic.partitions}

    def close(self) -> None:
        self._consumer.close()


class Watermark:
    """Publishes the archiver watermark at `keys.archiver_watermark()` from sampled end offsets and
    the durable positions in Redis."""

    def __init__(
        self,
        client: aioredis.Redis,
        topic: str,
        grace_ms: int,
        end_offsets: EndOffsets,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self.topic = topic
        self._grace_ms = grace_ms
        self._end_offsets = end_offsets
        self._clock = clock
        self._samples: deque[tuple[int, dict[int, int]]] = deque(maxlen=MAX_SAMPLES)
        self._set_max = client.register_script(_SET_MAX)

    async def record_positions(self, positions: dict[int, int]) -> None:
        """Store partitions' durable positions (next offset in the log); never moves one back."""
        if not positions:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for partition, position in positions.items():
                await self._set_max(
                    keys=[keys.archiver_position(self.topic, partition)], args=[position], client=pipe
                )
            await pipe.execute()

    async def positions(self, partitions: list[int]) -> dict[int, int]:
        values = await self._client.mget([keys.archiver_position(self.topic, p) for p in partitions])
        return {p: int(v) if v is not None else 0 for p, v in zip(partitions, values, strict=True)}

    async def tick(self) -> int | None:
        """Take a sample, then publish the newest satisfied sample's t - grace. Returns the
        watermark now in Redis, or None while no sample is satisfied yet."""
        now_ms = int(self._clock() * 1000)
        ends = await asyncio.to_thread(self._end_offsets)
        self._samples.append((now_ms, ends))
        partitions = sorted({p for _, sample in self._samples for p in sample})
        positions = await self.positions(partitions)
        satisfied: int | None = None
        while self._samples and all(positions[p] >= end for p, end in self._samples[0][1].items()):
            satisfied = self._samples.popleft()[0]
        if satisfied is None:
            return None
        value = await self._set_max(keys=[keys.archiver_watermark()], args=[satisfied - self._grace_ms])
        return int(value)
