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

from counting import keys, redisconn
from counting.offsets import end_reader, read_ends

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
        return read_ends(self._consumer, self.topic, topic.partitions, self._timeout)

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

    async def record_positions(self, positions: dict[int, int]) -> None:
        """Store partitions' durable positions (next offset in the log); never moves one back."""
        if not positions:
            return
        calls = [(keys.archiver_position(self.topic, p), [position]) for p, position in positions.items()]
        for answer in await redisconn.eval_each(self._client, _SET_MAX, calls):
            if isinstance(answer, Exception):
                raise answer

    async def positions(self, partitions: list[int]) -> dict[int, int]:
        async with self._client.pipeline(transaction=False) as pipe:  # not MGET: many slots
            for partition in partitions:
                pipe.get(keys.archiver_position(self.topic, partition))
            values = await pipe.execute()
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
        [value] = await redisconn.eval_each(
            self._client, _SET_MAX, [(keys.archiver_watermark(), [satisfied - self._grace_ms])]
        )
        if isinstance(value, Exception):
            raise value
        return int(value)
