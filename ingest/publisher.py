"""Publish stamped events to the broker: one record per partition, answered after acks=all.

A hot video's events are keyed `video_id#k` (k below its shard count, which the speed layer keeps
in Redis) so they spread over partitions and workers. k is a function of the viewer: all events of
one viewer of a video (and every retry of an event) stay in one partition, in order, so dedup, the
view window and "first seen" stay exact while the shard count holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import cast

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from counting import keys, redisconn, rules
from counting.event import Event, stamped
from counting.logs import Log
from counting.settings import Settings
from counting.values import ShardPlan, UnknownLayout, decode_shard_plan
from counting.wire import encode_events, partition_for, record_key
from ingest.errors import BrokerUnavailable

log = Log("tally.ingest")
# How long a video's shard count is trusted before it is read again; how long Redis is left alone
# after it failed to answer (ingest never waits on Redis for longer than its timeouts).
SHARDS_TTL_S = rules.SHARD_CACHE_MS / 1000
ONE_SHARD = ShardPlan()
REDIS_BACKOFF_S = 5.0
REDIS_TIMEOUT_S = 0.2
# How long the producer waits for more records before a produce request: the likes of concurrent
# requests share one request and one batch a partition (the local broker lists every batch of a
# partition at each read, so fewer batches cost it less as its log grows). A lone like waits that
# much more; at 2,000 likes/s the tail is shorter (docs/benchmarks.md, `bench.ingest`).
LINGER_MS = 2


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def shard_of(event: Event, shards: int) -> int:
    """The shard of an event of a video with `shards` shards (`rules.route_of`: a viewer's views and
    an event's retries share a partition, and so do a session's heartbeats and leave)."""
    if shards <= 1:
        return 0
    return rules.route_of(event) % shards


def records_of(
    events: list[Event], plans: dict[str, ShardPlan], partitions: int
) -> list[tuple[int, bytes, bytes]]:
    """The events as records, (partition, key, value), in partition order: one record a partition,
    keyed by its first event's video (or shard), its events in their order. A video without a
    plan (most) has its key and partition made once."""
    grouped: dict[int, tuple[bytes, list[Event]]] = {}
    plain: dict[str, list[Event]] = {}  # a video of one shard -> its events' partition's list
    for event in events:
        video = event.video_id
        batch = plain.get(video)
        if batch is None:
            plan = plans.get(video)
            key = record_key(video, 0 if plan is None else shard_for(event, plan))
            batch = grouped.setdefault(partition_for(key, partitions), (key, []))[1]
            if plan is None:
                plain[video] = batch
        batch.append(event)
    return [(partition, key, encode_events(batch)) for partition, (key, batch) in sorted(grouped.items())]


def shard_for(event: Event, plan: ShardPlan) -> int:
    """The shard of a stamped event under its video's plan: one shard before the plan holds."""
    return shard_of(event, plan.shards_at(event.ingest_ts or 0))


class ShardPlans:
    """The hot videos' shard plans (`keys.shard_plans`), read whole from Redis and trusted for
    SHARDS_TTL_S; a video left out, or every video while Redis does not answer, has one shard.

    One read serves every video and every request: past half its time the table is read again in
    the background while it is still used; past its time a write waits for the read (one read for
    all the writes waiting), so no write routes by plans older than SHARDS_TTL_S while Redis answers.
    """

    def __init__(self, client: aioredis.Redis | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._plans: dict[str, ShardPlan] = {}
        self._read_at = -SHARDS_TTL_S  # never read: the first write waits for a read
        self._quiet_until = 0.0
        self._reading: asyncio.Task[None] | None = None

    async def current(self) -> dict[str, ShardPlan]:
        """video -> its plan, for the videos with more than one shard (`.get(video, ONE_SHARD)`)."""
        now = self._clock()
        age = now - self._read_at
        if age >= SHARDS_TTL_S / 2 and self._client is not None and now >= self._quiet_until:
            reading = self._reading
            if reading is None or reading.done():
                reading = self._reading = asyncio.get_running_loop().create_task(self._read())
            if age >= SHARDS_TTL_S:
                await asyncio.shield(reading)  # a cancelled write leaves the read to the others
        return self._plans

    async def _read(self) -> None:
        """Read every plan; where Redis does not answer, keep the plans read last and leave Redis
        alone for REDIS_BACKOFF_S."""
        assert self._client is not None
        began = self._clock()
        try:
            raw = cast(dict[bytes, bytes], await self._client.hgetall(keys.shard_plans()))
        except (RedisError, OSError) as exc:
            self._quiet_until = self._clock() + REDIS_BACKOFF_S
            log.warning("shards_unavailable", error=repr(exc), retry_in_s=REDIS_BACKOFF_S)
            return
        plans = {}
        for video, value in raw.items():
            name = video.decode()
            plans[name] = _plan_of(name, value)
        self._plans = plans
        self._read_at = began

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        if self._client is not None:
            await self._client.aclose()


def _plan_of(video: str, value: bytes) -> ShardPlan:
    """A video's plan as read; one shard (and a warning) for a value of an unknown layout."""
    try:
        return decode_shard_plan(value)
    except UnknownLayout as exc:
        log.warning("shard_plan_unreadable", video=video, error=str(exc))
        return ONE_SHARD


class Publisher:
    """Stamps `ingest_ts` and writes events to the events topic, packed per partition.

    Stamping and appending happen under one lock, so within a partition the log order follows
    `ingest_ts`; the acknowledgements are awaited outside it.
    """

    def __init__(
        self, settings: Settings, clock: Callable[[], int] = now_ms, plans: ShardPlans | None = None
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._region = settings.region if settings.peers else None  # several regions: stamped
        self._lock = asyncio.Lock()
        self._producer: AIOKafkaProducer | None = None
        self._partitions = 0
        self._next_attempt = 0.0
        self._plans = plans or ShardPlans(
            redisconn.async_client(
                settings, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
            )
        )

    async def start(self) -> None:
        """Connect to the broker; when it is away the API still starts and answers 503 until it is
        back (each write tries to reconnect, at most once a second)."""
        try:
            await self._connect()
        except BrokerUnavailable as exc:
            log.warning("broker_unavailable_at_start", error=exc)

    async def _connect(self) -> AIOKafkaProducer:
        now = time.monotonic()
        if now < self._next_attempt:
            raise BrokerUnavailable(
                f"the broker at {self._settings.kafka_bootstrap} is unreachable; retry the request shortly"
            )
        self._next_attempt = now + 1.0
        producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.kafka_bootstrap,
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=self._settings.delivery_timeout_ms,
            linger_ms=LINGER_MS,
            max_request_size=8 * 1024 * 1024,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            raise BrokerUnavailable(
                f"the broker is not reachable at {self._settings.kafka_bootstrap}: start it with "
                f"'tally up' or set TALLY_KAFKA_BOOTSTRAP ({exc})"
            ) from exc
        self._producer = producer
        self._partitions = 0
        return producer

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        await self._plans.close()

    async def _partition_count(self, producer: AIOKafkaProducer) -> int:
        if not self._partitions:
            partitions = await producer.partitions_for(self._settings.events_topic)
            self._partitions = len(partitions)
        return self._partitions

    async def publish(self, events: list[Event]) -> list[Event]:
        """Stamp and write the events; return them stamped once the broker has acknowledged all.
        The caller leaves out copies of one event_id (`rules.first_copies`)."""
        return await self._write(events, stamp=True)

    async def forward(self, events: list[Event]) -> None:
        """Write events stamped elsewhere (another region's reactions, decision 0006) as they are,
        routed as this region routes its own; return once the broker has acknowledged all. Copies
        of one event_id among them are written once (`rules.first_copies`): one record holds no
        event twice."""
        events, copies = rules.first_copies(events)
        if copies:
            log.info("forward_copies_left_out", copies=len(copies))
        await self._write(events, stamp=False)

    async def _write(self, events: list[Event], stamp: bool) -> list[Event]:
        if not events:
            return []
        producer = self._producer
        if producer is None:
            async with self._lock:
                producer = self._producer or await self._connect()
        timeout = self._settings.delivery_timeout_ms / 1000
        plans = await self._plans.current()
        try:
            # One deadline for the whole write: waiting for the lock, the partition count, room in
            # the producer's buffer and the acknowledgements (a paused broker is refused in time).
            async with asyncio.timeout(timeout):
                async with self._lock:
                    partitions = await self._partition_count(producer)
                    if stamp:
                        ingest_ts = self._clock()
                        written = [stamped(e, ingest_ts, self._region) for e in events]
                    else:
                        written = events
                    topic = self._settings.events_topic
                    futures = [
                        await producer.send(topic, value=value, key=key, partition=partition)
                        for partition, key, value in records_of(written, plans, partitions)
                    ]
                await asyncio.gather(*futures)
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailable(
                f"the broker at {self._settings.kafka_bootstrap} did not acknowledge the write "
                f"({type(exc).__name__}: {exc}); nothing was acknowledged, retry the request"
            ) from exc
        return written
