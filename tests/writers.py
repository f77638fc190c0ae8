"""Tally's real writers in one test process: the ingest API's records and reaction state, the counter,
the archiver with its watermark and the batch job, so that tests of a reader read what they wrote;
`archived_until` and `heat` publish a watermark and a shard plan through them alone."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from pyspark.sql import SparkSession

from batch_layer.job import BatchResult, compute_batch, publish_batch, run_batch
from batch_layer.session import build_session
from counting import keys
from counting.catalog import CatalogRow
from counting.event import Event, stamped
from counting.settings import Settings
from counting.values import ShardPlan, decode_shard_plan
from counting.wire import encode_events, partition_for, record_key
from ingest.publisher import ShardPlans, shard_for
from ingest.reactions import ReactionState
from speed_layer.archiver.archiver import ParquetLog
from speed_layer.archiver.watermark import Watermark
from speed_layer.counter.state_counter import StateCounter
from speed_layer.counter.stream import BatchReport, SendDeadLetter
from speed_layer.deadletter import DeadLetter
from speed_layer.records import Record

SparkProvider = Callable[[], SparkSession]
TEST_SPARK_MASTER = "local[2]"


class Writers:
    """The writers of one deployment (the settings' Redis, data directory and topic), in process.

    `ingest` does what the ingest API does with stamped events: one record per partition for the
    events stamped together (a hot video's keyed by shard, as Redis says), then the reaction state.
    The records wait on an in-memory topic until `count` (the counter worker: claim, plan, write)
    or `archive` (the Parquet log, then the watermark) consume them, as two consumer groups would.
    `batch` runs the Spark job on the log and publishes its baseline.
    """

    def __init__(
        self,
        settings: Settings,
        spark: SparkProvider | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.records: list[Record] = []  # the events topic, in append order
        self._spark = spark
        self._runner = asyncio.Runner()
        self._redis = aioredis.Redis.from_url(settings.redis_url)
        self._ends: dict[int, int] = {}  # per partition: the offset its next record gets
        self._counted = 0  # records of the topic the counter has consumed
        self._archived = 0
        self._claimed = False
        self._shards = ShardPlans(self._redis, clock)  # the harness's time ages the plans read
        self._reactions = ReactionState(self._redis)
        self._counter = new_counter(settings, self._redis, _no_dead_letters, clock)
        self._log = ParquetLog(settings.raw_dir, settings.events_topic)
        self._watermark = Watermark(
            self._redis, settings.events_topic, settings.delivery_timeout_ms, self._end_offsets, clock
        )

    def start(self) -> None:
        """The counter takes every partition of the topic (what a running counter leaves in Redis)."""
        partitions = list(range(self.settings.topic_partitions))
        self._runner.run(self._counter.claim(self.settings.events_topic, partitions))
        self._claimed = True

    def ingest(self, events: Sequence[Event], reaction_state: bool = True) -> list[Record]:
        """Append stamped events to the topic as the ingest API packs them, then apply their
        reactions to the ingest's reaction state (`reaction_state=False`: that write failed)."""
        if any(e.ingest_ts is None for e in events):
            raise ValueError("events reach the topic stamped: give each one its ingest_ts")
        published: list[Record] = []
        ordered = sorted(events, key=lambda e: e.ingest_ts or 0)
        for _, request in itertools.groupby(ordered, key=lambda e: e.ingest_ts):
            published += self._publish(list(request))
        if reaction_state:
            self._runner.run(self._reactions.apply(list(events)))
        return published

    def _publish(self, request: list[Event]) -> list[Record]:
        """The events of one request (one ingest_ts): one record per partition, keyed by video or,
        for a hot video, by shard (as `ingest.publisher.Publisher.publish` sends them)."""
        plans = self._runner.run(self._shards.current())
        grouped: dict[int, tuple[bytes, list[Event]]] = {}
        for event in request:
            key = record_key(event.video_id, shard_for(event, plans.get(event.video_id, ShardPlan())))
            grouped.setdefault(partition_for(key, self.settings.topic_partitions), (key, []))[1].append(event)
        published = []
        for partition, (key, batch) in sorted(grouped.items()):
            offset = self._ends.get(partition, 0)
            self._ends[partition] = offset + 1
            published.append(Record(self.settings.events_topic, partition, offset, encode_events(batch), key))
        self.records += published
        return published

    def count(self) -> BatchReport:
        """The counter's micro-batch of every record it has not consumed yet."""
        if not self._claimed:
            self.start()
        records = self.records[self._counted :]
        self._counted = len(self.records)
        report = self._runner.run(self._counter.handle(records))
        assert not report.fenced, f"the counter lost partitions {report.fenced}"
        return report

    def archive(self) -> int:
        """The archiver's batch of every record it has not consumed yet, then a watermark tick (the
        topic's end offsets sampled now); returns the watermark."""
        records = self.records[self._archived :]
        self._archived = len(self.records)
        report = self._log.write(records)
        self._runner.run(self._watermark.record_positions(report.positions))
        watermark = self._runner.run(self._watermark.tick())
        assert watermark is not None, "the log holds every record of the topic: the sample is satisfied"
        return watermark

    def batch(
        self,
        cutoff_ms: int,
        run_id: str | None = None,
        publish: bool = True,
        videos: Mapping[str, CatalogRow] | None = None,
    ) -> BatchResult:
        """Run the batch job on the log below the cutoff and publish its baseline (`run_batch`), or
        only compute it (`compute_batch`); with the catalog's `videos`, payouts and reach too."""
        if self._spark is None:
            raise ValueError("Writers(settings, spark=...) runs the batch: give it the spark fixture")
        spark = running_session(self._spark(), self.settings)
        if publish:
            return run_batch(self.settings, cutoff_ms, run_id=run_id, spark=spark, videos=videos)
        return compute_batch(self.settings, cutoff_ms, run_id=run_id, spark=spark, videos=videos)

    def _end_offsets(self) -> dict[int, int]:
        """The topic's end offsets, as the watermark samples them from the broker."""
        return dict(self._ends)

    def close(self) -> None:
        self._runner.run(self._redis.aclose())
        self._runner.close()


def new_counter(
    settings: Settings, client: aioredis.Redis, send_dead_letter: SendDeadLetter, clock: Any = time.time
) -> StateCounter:
    """The counter, as the counter app builds it."""
    return StateCounter(settings, client, send_dead_letter, clock)


@contextmanager
def writers(
    settings: Settings, spark: SparkProvider | None = None, clock: Callable[[], float] = time.time
) -> Iterator[Writers]:
    """`Writers`, closed on exit."""
    running = Writers(settings, spark, clock)
    try:
        yield running
    finally:
        running.close()


@dataclass(frozen=True)
class History:
    """Events the pipeline processed once, in a data directory of its own (`source`): ingested,
    archived and batched at some cutoffs, the runs left unpublished. Tests share it (Spark runs
    once), each counting the events again in its own Redis and publishing a run in its own data
    directory."""

    source: Settings
    events: list[Event]
    runs: list[BatchResult]

    @classmethod
    def build(
        cls, source: Settings, spark: SparkProvider, events: list[Event], cutoffs: Sequence[int]
    ) -> History:
        with writers(source, spark) as tally:
            tally.ingest(events)
            tally.archive()
            runs = [tally.batch(cutoff, publish=False) for cutoff in cutoffs]
        return cls(source, events, runs)

    def count(self, tally: Writers) -> None:
        """The events through a test's ingest API and counter (its speed layer and reaction state)."""
        tally.ingest(self.events)
        tally.count()

    def publish(self, settings: Settings, run: BatchResult) -> None:
        """The batch's switch to `run` in the test's data directory, the run's outputs copied there
        as the batch wrote them."""
        if settings.bucket_ms != self.source.bucket_ms:
            raise ValueError(
                f"the history's buckets are {self.source.bucket_ms} ms, the test's {settings.bucket_ms} ms"
            )
        for source, target in (
            (self.source.baselines_dir, settings.baselines_dir),
            (self.source.batch_dir, settings.batch_dir),
        ):
            if (source / run.run_id).exists():
                shutil.copytree(source / run.run_id, target / run.run_id, dirs_exist_ok=True)
        publish_batch(settings, run)


def archived_until(settings: Settings, watermark_ms: int) -> int:
    """Publish the archiver watermark `watermark_ms` through the archiver's `Watermark`: one tick at
    watermark_ms + the delivery grace, the sampled end offsets already in the log (an empty topic).
    Like the archiver's, it never moves the watermark back; returns the watermark now in Redis."""
    # Half a millisecond in: the watermark truncates its clock to whole milliseconds.
    at = (watermark_ms + settings.delivery_timeout_ms + 0.5) / 1000
    empty = dict.fromkeys(range(settings.topic_partitions), 0)

    async def tick() -> int | None:
        client = aioredis.Redis.from_url(settings.redis_url)
        try:
            watermark = Watermark(
                client, settings.events_topic, settings.delivery_timeout_ms, lambda: empty, lambda: at
            )
            return await watermark.tick()
        finally:
            await client.aclose()

    published = asyncio.run(tick())
    assert published is not None, "an empty topic's sample is satisfied at once"
    return published


def heat(settings: Settings, video: str, seconds: int = 2) -> ShardPlan:
    """Views of `video` at twice the settings' hot threshold for `seconds` seconds of ingestion,
    counted a second at a time by the real counter: from the second second on the video is hot, and
    the counter of its home partition plans `max_video_shards` shards from `NOTICE_MS` ahead and
    announces the plan in Redis. Returns the plan Redis holds then."""
    now = [time.time()]
    per_second = 2 * settings.hot_video_events_per_sec
    with writers(settings, clock=lambda: now[0]) as tally:
        start = int(now[0] * 1000)
        for second in range(seconds):
            stamp = start + second * 1000
            views = [
                _hot_view(f"heat-{start}-{second}-{i}", video, f"u{i}", stamp + i * 1000 // per_second)
                for i in range(per_second)
            ]
            tally.ingest([stamped(view, view.ts) for view in views])
            tally.count()
            now[0] += 1.0
    client = redis.Redis.from_url(settings.redis_url)
    try:
        raw = client.hget(keys.shard_plans(), video)
    finally:
        client.close()
    assert raw is not None, f"{video} was not planned hot after {seconds} s of heat"
    return decode_shard_plan(raw)


def _hot_view(event_id: str, video: str, user: str, ts: int) -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id=video,
        ts=ts,
        user_id=user,
        session_id=f"s-{user}",
        watch_secs=40.0,
    )


def running_session(spark: SparkSession, settings: Settings) -> SparkSession:
    """`spark` while it runs, else a session built again: a batch run given no session (as the DAG's
    tasks run it) stops the one `getOrCreate` handed it, the process's active session, ours."""
    if SparkSession.getActiveSession() is spark:
        return spark
    return build_session(settings.model_copy(update={"spark_master": TEST_SPARK_MASTER}), "tally-tests")


def closed_bucket(settings: Settings) -> int:
    """A bucket b recent enough for presence and old enough to batch: events stamped up to the end
    of bucket b + 1 are in the past, and the archiver's watermark (now less the delivery grace) has
    passed the edge (b + 2) * bucket_ms."""
    now = time.time_ns() // 1_000_000
    return (now - settings.delivery_timeout_ms) // settings.bucket_ms - 2


async def _no_dead_letters(letter: DeadLetter) -> None:
    raise AssertionError(f"a record the tests wrote was dead-lettered: {letter.headers}")
