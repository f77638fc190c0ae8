"""Faust wiring of the two workers (separate apps and consumer groups): the counter and the archiver.
Logic lives in CounterWorker, ParquetLog and Watermark; this module only connects them to streams."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar, cast

import faust
import redis.asyncio as aioredis
from faust.streams import Stream
from faust.types import TP, EventT, StreamT
from mode.types.signals import BaseSignalT
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from counting.settings import Settings
from speed_layer import logs, metrics
from speed_layer.archiver import ParquetLog
from speed_layer.counter_worker import CounterWorker, PlannedBatch
from speed_layer.deadletter import DeadLetter
from speed_layer.records import Record
from speed_layer.watermark import BrokerEndOffsets, Watermark

MAX_COUNTER_RECORDS = 1_000
# The longest the broker may hold the counter's fetch when it has nothing new (see _shorten_fetch_wait).
COUNTER_FETCH_WAIT_MS = 100
MAX_ARCHIVER_RECORDS = 5_000
RETRY_MAX_S = 5.0
T = TypeVar("T")


def app_id(worker: str, settings: Settings, group: str | None = None) -> str:
    """The Faust app id (and consumer group) of a worker: one group per worker kind and topic, or
    a group of the operator's choosing (a new group reads the topic from its start: a replay)."""
    return group or f"tally-{worker}-{settings.events_topic}"


# Kafka's classic consumer default; a dead worker's partitions wait this long before a rebalance
# hands them on (tests that kill workers use less).
SESSION_TIMEOUT_S = 10.0


def _faust_app(
    worker: str,
    settings: Settings,
    group: str | None,
    session_timeout: float = SESSION_TIMEOUT_S,
    instance: int = 1,
) -> faust.App:
    name = app_id(worker, settings, group)
    # Processes of one group on one machine each keep their own data directory.
    datadir = settings.run_dir / "faust" / (name if instance == 1 else f"{name}-{instance}")
    datadir.parent.mkdir(parents=True, exist_ok=True)
    return faust.App(
        name,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        web_enabled=False,
        web_bind=settings.faust_web_host,  # loopback by default, should Faust's web server be enabled
        autodiscover=False,
        datadir=str(datadir),
        topic_partitions=settings.topic_partitions,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # Tansu holds a new group's first join for half the session timeout; 10 s (Kafka's classic
        # consumer default, heartbeats every 3 s) keeps a worker's start near 5 s instead of 30 s.
        broker_session_timeout=session_timeout,
        broker_heartbeat_interval=min(3.0, session_timeout / 3),
    )


async def _batches(stream: StreamT[bytes], max_records: int, flush_ms: int) -> AsyncIterator[list[EventT]]:
    """Micro-batches of events that are acked by hand (`stream.ack`) once their batch is stored."""
    # noack_take yields the buffered events (not values) and never acks them itself.
    async for batch in cast(Stream[bytes], stream).noack_take(max_records, within=flush_ms / 1000):
        yield cast(list[EventT], list(batch))


def record_of(event: EventT) -> Record:
    message = event.message
    return Record(message.topic, message.partition, message.offset, message.value, message.key)


async def _retrying(what: str, action: Callable[[], Awaitable[T]]) -> T:
    """Run `action` until it succeeds when a store is unreachable (the batch is idempotent)."""
    delay = 0.2
    while True:
        try:
            return await action()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            logs.error("retrying", what=what, error=exc, retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)


OnCrash = Callable[[str, BaseException], None]


class CrashSwitch:
    """Stops the worker process when an agent fails on anything but a store outage (those are
    retried): Faust would restart the agent past the failed batch, leaving unacked records behind
    offsets that later batches commit. A stopped worker restarts from its committed offsets."""

    def __init__(self) -> None:
        self.reason: BaseException | None = None

    def __call__(self, worker: str, exc: BaseException) -> None:
        self.reason = exc
        logs.error("worker_crashed", worker=worker, error=repr(exc))
        os.kill(os.getpid(), signal.SIGTERM)


def create_counter_app(
    settings: Settings,
    group: str | None = None,
    crash: OnCrash | None = None,
    session_timeout: float = SESSION_TIMEOUT_S,
    instance: int = 1,
) -> faust.App:
    """The counter: events topic -> micro-batches -> one atomic Redis write per partition plan."""
    app = _faust_app("counter", settings, group, session_timeout, instance)
    events_topic = app.topic(settings.events_topic, key_serializer="raw", value_serializer="raw")
    dead_letter_topic = app.topic(settings.dead_letter_topic, key_serializer="raw", value_serializer="raw")
    client = aioredis.Redis.from_url(settings.redis_url)

    async def send_dead_letter(letter: DeadLetter) -> None:
        delivery = await dead_letter_topic.send(key=letter.key, value=letter.value, headers=letter.headers)
        await delivery

    worker = CounterWorker(settings, client, send_dead_letter)

    @app.agent(events_topic, name="count")
    async def count(stream: StreamT[bytes]) -> None:
        logs.info("counter_started", topic=settings.events_topic, redis=settings.redis_url)

        reported: list[BaseException] = []

        async def write_and_ack(batch: PlannedBatch, events: list[EventT]) -> None:
            try:
                report = await worker.write(batch)
                fenced = report.fenced
                for event in events:
                    message = event.message
                    if (message.topic, message.partition) not in fenced:
                        await stream.ack(event)
                _observe_lag(app, "counter", batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Stop here: no later batch may be written (its offsets would pass this one's).
                reported.append(exc)
                if crash is not None:
                    crash("counter", exc)
                raise

        # One write in flight: the next micro-batch is planned while Redis runs the previous one;
        # writes still reach Redis in order (each waits for the one before).
        writing: asyncio.Future[None] | None = None
        try:
            async for events in _batches(stream, MAX_COUNTER_RECORDS, settings.counter_flush_ms):
                batch = worker.plan([record_of(e) for e in events])
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(write_and_ack(batch, events))
        except Exception as exc:
            if crash is not None and exc not in reported:
                crash("counter", exc)
            raise

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        _shorten_fetch_wait(app, min(COUNTER_FETCH_WAIT_MS, settings.counter_flush_ms))
        assigned = args[0] if args else kwargs.get("assigned", set())
        mine = sorted(tp.partition for tp in assigned if tp.topic == settings.events_topic)
        await worker.claim(settings.events_topic, mine)

    return app


def _shorten_fetch_wait(app: faust.App, wait_ms: int) -> None:
    """Faust asks the broker to hold an empty fetch up to 1.5 s (fetch_max_wait_ms, fixed in its
    aiokafka driver); Tansu holds it that long even when records arrive meanwhile, which alone
    adds about 0.4 s (p50) to 0.75 s to the counter's freshness. Shorten it on the running consumer."""
    aiokafka_consumer = getattr(getattr(app.consumer, "_thread", None), "_consumer", None)
    fetcher = getattr(aiokafka_consumer, "_fetcher", None)
    if fetcher is None or not hasattr(fetcher, "_fetch_max_wait_ms"):
        logs.warning("fetch_wait_unchanged", reason="no aiokafka fetcher found", wait_ms=wait_ms)
        return
    fetcher._fetch_max_wait_ms = wait_ms


def _observe_lag(app: faust.App, worker: str, batch: PlannedBatch) -> None:
    """Set the lag gauge of the partitions of a stored batch (the broker's end minus what is stored)."""
    consumer = app.consumer
    for write in batch.plan.writes:
        try:
            end = consumer.highwater(TP(write.topic, write.partition))
        except Exception:  # no fetch yet: nothing to report
            continue
        if end is not None:
            metrics.LAG.labels(worker, write.topic, str(write.partition)).set(
                max(0, end - write.last_offset - 1)
            )


def create_archiver_app(
    settings: Settings,
    group: str | None = None,
    crash: OnCrash | None = None,
    session_timeout: float = SESSION_TIMEOUT_S,
    instance: int = 1,
) -> faust.App:
    """The archiver: events topic -> Parquet log files, then Kafka commits; publishes the watermark."""
    app = _faust_app("archiver", settings, group, session_timeout, instance)
    events_topic = app.topic(settings.events_topic, key_serializer="raw", value_serializer="raw")
    client = aioredis.Redis.from_url(settings.redis_url)
    log = ParquetLog(settings.raw_dir, settings.events_topic)
    end_offsets = BrokerEndOffsets(settings.kafka_bootstrap, settings.events_topic)
    watermark = Watermark(client, settings.events_topic, settings.delivery_timeout_ms, end_offsets)

    @app.agent(events_topic, name="archive")
    async def archive(stream: StreamT[bytes]) -> None:
        await asyncio.to_thread(log.recover)
        positions = await asyncio.to_thread(log.positions)
        await _retrying("seed_positions", partial(watermark.record_positions, positions))
        logs.info(
            "archiver_started", topic=settings.events_topic, raw_dir=settings.raw_dir, positions=positions
        )
        try:
            async for events in _batches(stream, MAX_ARCHIVER_RECORDS, settings.archiver_flush_ms):
                records = [record_of(e) for e in events]
                started = time.perf_counter()
                report = await _retrying("write_log", partial(asyncio.to_thread, log.write, records))
                metrics.FLUSH_SECONDS.labels("archiver").observe(time.perf_counter() - started)
                metrics.RECORDS.labels("archiver").inc(len(records))
                metrics.EVENTS.labels("archiver").inc(report.rows)
                metrics.BATCH_RECORDS.labels("archiver").observe(len(records))
                metrics.BATCH_EVENTS.labels("archiver").observe(report.rows)
                await _retrying("record_positions", partial(watermark.record_positions, report.positions))
                for event in events:
                    await stream.ack(event)
                logs.info(
                    "archive_batch",
                    records=len(records),
                    rows=report.rows,
                    files=len(report.files),
                    skipped=report.skipped,
                    poison=report.poison,
                    positions=report.positions,
                )
        except Exception as exc:
            if crash is not None:
                crash("archiver", exc)
            raise

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        log.forget()

    @app.timer(interval=settings.archiver_flush_ms / 1000)
    async def advance_watermark() -> None:
        try:
            # Re-publish what the log holds (covers a Redis that lost the positions, and batches
            # of poison records only), then sample and advance.
            await watermark.record_positions(await asyncio.to_thread(log.positions))
            value = await watermark.tick()
        except Exception as exc:  # a broker or Redis hiccup only delays the watermark
            logs.warning("watermark_failed", error=exc)
            return
        if value is not None:
            metrics.WATERMARK.set(value)
            logs.info("watermark", topic=settings.events_topic, watermark_ms=value)

    return app
