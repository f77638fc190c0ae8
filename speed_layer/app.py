"""Faust wiring of the two workers (separate apps and consumer groups): the counter and the archiver.
Logic lives in StateCounter (state_counter.py, driven by stream.py) and ArchiveWorker; this module
only connects them to Faust's streams, timers and rebalance signals."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import faust
from faust.streams import Stream
from faust.types import TP, EventT, StreamT, TopicT
from mode.types.signals import BaseSignalT

from counting import redisconn
from counting.regions import Exchange, encode_exchange
from counting.settings import Settings
from speed_layer import heap, logs
from speed_layer.archiver.archive_worker import ArchiveWorker
from speed_layer.archiver.archiver import ParquetLog
from speed_layer.archiver.watermark import BrokerEndOffsets, Watermark
from speed_layer.counter.state_counter import StateCounter
from speed_layer.counter.stream import Consumed, count_stream
from speed_layer.deadletter import DeadLetter
from speed_layer.fetch_wait import shorten_fetch_wait
from speed_layer.records import Record
from speed_layer.regions.regions import Publish

MAX_COUNTER_RECORDS = 1_000
# The longest the broker may hold the counter's fetch when it has nothing new (speed_layer/fetch_wait.py).
COUNTER_FETCH_WAIT_MS = 100
MAX_ARCHIVER_RECORDS = 5_000
WATERMARK_TICK_MS = 1_000


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


def _end_offset(app: faust.App, topic: str, partition: int) -> int | None:
    """A partition's end offset as the consumer last fetched it (None before its first fetch)."""
    try:
        end = app.consumer.highwater(TP(topic, partition))
    except Exception:
        return None
    return cast(int | None, end)


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


@dataclass(frozen=True)
class WorkerOptions:
    """How one worker process joins its group: the group (None: the kind's own), what to call when
    it crashes, the broker's session timeout, and which process of its kind it is (from 1)."""

    group: str | None = None
    crash: OnCrash | None = None
    session_timeout: float = SESSION_TIMEOUT_S
    instance: int = 1


def _events_app(worker: str, settings: Settings, options: WorkerOptions) -> tuple[faust.App, TopicT]:
    app = _faust_app(worker, settings, options.group, options.session_timeout, options.instance)
    return app, app.topic(settings.events_topic, key_serializer="raw", value_serializer="raw")


def create_counter_app(settings: Settings, options: WorkerOptions | None = None) -> faust.App:
    """The counter: events topic -> micro-batches applied to the partitions' state in this worker ->
    a commit and a sink of the read keys per partition."""
    options = options or WorkerOptions()
    app, events_topic = _events_app("counter", settings, options)
    dead_letter_topic = app.topic(settings.dead_letter_topic, key_serializer="raw", value_serializer="raw")
    client = redisconn.async_client(settings)

    async def send_dead_letter(letter: DeadLetter) -> None:
        delivery = await dead_letter_topic.send(key=letter.key, value=letter.value, headers=letter.headers)
        await delivery

    heap.tune()  # this process holds the partitions' state
    worker = StateCounter(settings, client, send_dead_letter, publish=_publisher(app, settings))

    @app.agent(events_topic, name="count")
    async def count(stream: StreamT[bytes]) -> None:
        logs.info("counter_started", topic=settings.events_topic, redis=settings.redis_url)
        consumed = Consumed(record_of, stream.ack, partial(_end_offset, app))
        batches = _batches(stream, MAX_COUNTER_RECORDS, settings.counter_flush_ms)
        await count_stream(worker, batches, consumed, partial(_report_crash, options.crash, "counter"))

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        shorten_fetch_wait(app, min(COUNTER_FETCH_WAIT_MS, settings.counter_flush_ms))
        assigned = args[0] if args else kwargs.get("assigned", set())
        mine = sorted(tp.partition for tp in assigned if tp.topic == settings.events_topic)
        await worker.assigned(settings.events_topic, mine)

    return app


def _publisher(app: faust.App, settings: Settings) -> Publish | None:
    """With other regions: send what each entry the counter sank changed (its components, the
    reactions accepted here) to this region's components topic, one message a partition and batch,
    keyed by the partition (decision 0006)."""
    if not settings.peers:
        return None
    topic = app.topic(settings.components_topic, key_serializer="raw", value_serializer="raw")

    async def publish(exchange: Exchange) -> None:
        if exchange.components or exchange.reactions:
            partition = exchange.components[0].partition if exchange.components else 0
            key = f"{settings.region}:{partition}".encode()
            delivery = await topic.send(key=key, value=encode_exchange(exchange))
            await delivery

    return publish


def _report_crash(crash: OnCrash | None, worker: str, exc: BaseException) -> None:
    if crash is not None:
        crash(worker, exc)


def create_archiver_app(settings: Settings, options: WorkerOptions | None = None) -> faust.App:
    """The archiver: events topic -> Parquet log files, then Kafka commits; publishes the watermark."""
    options = options or WorkerOptions()
    app, events_topic = _events_app("archiver", settings, options)
    client = redisconn.async_client(settings)
    log = ParquetLog(settings.own_log_dir, settings.events_topic, settings.region if settings.peers else None)
    end_offsets = BrokerEndOffsets(settings.kafka_bootstrap, settings.events_topic)
    watermark = Watermark(client, settings.events_topic, settings.delivery_timeout_ms, end_offsets)
    worker = ArchiveWorker(settings, log, watermark)

    @app.agent(events_topic, name="archive")
    async def archive(stream: StreamT[bytes]) -> None:
        try:
            await worker.start()
            batches = _batches(stream, MAX_ARCHIVER_RECORDS, settings.archiver_flush_ms)
            await worker.archive(batches, record_of, stream.ack)
        except Exception as exc:
            _report_crash(options.crash, "archiver", exc)
            raise

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        log.forget()

    # The watermark samples the end offsets at least once a second, whatever the flush interval: a
    # sample is met at the flush after it, so the watermark trails the log by one flush, not two.
    @app.timer(interval=min(settings.archiver_flush_ms, WATERMARK_TICK_MS) / 1000)
    async def advance_watermark() -> None:
        await worker.advance_watermark()

    return app
