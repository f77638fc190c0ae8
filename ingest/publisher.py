"""Publish stamped events to the broker: one record per partition, answered after acks=all."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from counting.event import Event, stamped
from counting.settings import Settings
from counting.wire import encode_events, partition_for, record_key
from ingest.errors import BrokerUnavailable


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Publisher:
    """Stamps `ingest_ts` and writes events to the events topic, packed per partition.

    Stamping and appending happen under one lock, so within a partition the log order follows
    `ingest_ts`; the acknowledgements are awaited outside it.
    """

    def __init__(self, settings: Settings, clock: Callable[[], int] = now_ms) -> None:
        self._settings = settings
        self._clock = clock
        self._lock = asyncio.Lock()
        self._producer: AIOKafkaProducer | None = None
        self._partitions = 0

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.kafka_bootstrap,
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=self._settings.delivery_timeout_ms,
            linger_ms=2,
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

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _partition_count(self, producer: AIOKafkaProducer) -> int:
        if not self._partitions:
            partitions = await producer.partitions_for(self._settings.events_topic)
            self._partitions = len(partitions)
        return self._partitions

    async def publish(self, events: list[Event]) -> list[Event]:
        """Stamp and write the events; return them stamped once the broker has acknowledged all."""
        if not events:
            return []
        producer = self._producer
        if producer is None:
            raise BrokerUnavailable("the ingest publisher is not started")
        timeout = self._settings.delivery_timeout_ms / 1000
        try:
            async with self._lock:
                partitions = await asyncio.wait_for(self._partition_count(producer), timeout)
                ingest_ts = self._clock()
                written = [stamped(e, ingest_ts) for e in events]
                grouped: dict[int, list[Event]] = defaultdict(list)
                for event in written:
                    grouped[partition_for(record_key(event.video_id), partitions)].append(event)
                futures = [
                    await producer.send(
                        self._settings.events_topic,
                        value=encode_events(batch),
                        key=record_key(batch[0].video_id),
                        partition=partition,
                    )
                    for partition, batch in sorted(grouped.items())
                ]
            await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailable(
                f"the broker at {self._settings.kafka_bootstrap} did not acknowledge the write "
                f"({type(exc).__name__}: {exc}); nothing was acknowledged, retry the request"
            ) from exc
        return written
