"""The platform overview route: event and view rates, bot share, the counter's lag, batch freshness
and the top and rising videos over the recent speed buckets (the dashboard's first page); the top
videos carry their served totals, each part says what it counts (`scopes`)."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, KafkaException
from fastapi import APIRouter
from redis.asyncio import Redis

from counting import keys, rules, trends
from counting.offsets import read_ends
from counting.settings import Settings
from serving_layer.baselines import BaselineCache
from serving_layer.errors import StoreUnavailable
from serving_layer.milestones import answer_of, read_milestones
from serving_layer.schemas import (
    BatchFreshness,
    BotShare,
    ConsumerLag,
    MilestoneAnswer,
    OverviewAnswer,
    OverviewPoint,
    OverviewScopes,
    PartitionLag,
    RefusedReason,
    Scope,
    TopVideo,
)
from serving_layer.speed import platform_counts, top_videos
from serving_layer.stats import REDIS_ERRORS, StatsReader, now_ms
from serving_layer.trends import WindowBuckets, rising_videos, speed_window

TOP_VIDEOS = 10  # videos in each of the top and rising lists
BROKER_TIMEOUT_S = 1.0  # per broker request; the whole reading is given twice that
END_OFFSETS_KEPT_S = 2.0  # the overview polls every few seconds: one broker reading serves them all
BUCKET_READS_IN_FLIGHT = 16
RECENT_MILESTONES = 10
MILESTONES_KEPT_S = 5.0
_REJECTED = "rejected:"


class EndOffsets:
    """The events topic's end offsets (the offset its next record gets, per partition), read from
    the broker in a thread with a short timeout and kept END_OFFSETS_KEPT_S, failures too, so a
    broker that does not answer slows no more than one overview in a while."""

    def __init__(self, settings: Settings) -> None:
        self._bootstrap = settings.kafka_bootstrap
        self._topic = settings.events_topic
        self._lock = asyncio.Lock()
        self._read_at = -END_OFFSETS_KEPT_S
        self._answer: tuple[dict[int, int] | None, str | None] = (None, None)

    async def get(self) -> tuple[dict[int, int] | None, str | None]:
        """(end offsets, None), or (None, why the broker gave none)."""
        async with self._lock:
            if time.monotonic() - self._read_at >= END_OFFSETS_KEPT_S:
                self._answer = await self._read()
                self._read_at = time.monotonic()
            return self._answer

    async def _read(self) -> tuple[dict[int, int] | None, str | None]:
        try:
            ends = await asyncio.wait_for(asyncio.to_thread(self._read_broker), 2 * BROKER_TIMEOUT_S)
        except (KafkaException, LookupError, TimeoutError) as exc:
            return None, (
                f"the broker at {self._bootstrap} did not give the end offsets of {self._topic!r}, so "
                f"the consumer lag is unknown: start it with 'tally up' or set TALLY_KAFKA_BOOTSTRAP "
                f"({exc or type(exc).__name__})"
            )
        return ends, None

    def _read_broker(self) -> dict[int, int]:
        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": "tally-serving-overview",
                "enable.auto.commit": False,
                "enable.partition.eof": True,  # `read_ends` reads to the end the broker signals
                "log_level": 2,  # no log line per failed connection: the answer says what failed
            }
        )
        try:
            topic = consumer.list_topics(self._topic, timeout=BROKER_TIMEOUT_S).topics.get(self._topic)
            if topic is None or topic.error is not None:
                raise LookupError(f"topic not found ({topic.error if topic else None})")
            return read_ends(consumer, self._topic, sorted(topic.partitions), BROKER_TIMEOUT_S)
        finally:
            consumer.close()


def overview_router(
    settings: Settings, redis: Redis, baselines: BaselineCache, reader: StatsReader
) -> APIRouter:
    """`/v1/overview`: the speed buckets of the window from Redis, each top video's total through
    the stats `reader` (the stats route's own answer), the batch freshness from `baselines`."""
    router = APIRouter()
    end_offsets = EndOffsets(settings)
    kept: list[tuple[float, list[MilestoneAnswer]]] = []  # (read at, the milestones recorded last)

    async def milestones_recorded_last() -> tuple[list[MilestoneAnswer], str | None]:
        """The RECENT_MILESTONES recorded last, from the store, read at most every MILESTONES_KEPT_S."""
        if kept and time.monotonic() - kept[0][0] < MILESTONES_KEPT_S:
            return kept[0][1], None
        try:
            found = await asyncio.to_thread(read_milestones, settings.store_url, None, RECENT_MILESTONES)
        except StoreUnavailable as exc:
            return [], f"milestones unknown: {exc}"
        answers = [answer_of(m) for m in found]
        kept[:] = [(time.monotonic(), answers)]
        return answers, None

    bucket_ms = settings.bucket_ms

    @router.get("/v1/overview", response_model=OverviewAnswer)
    async def overview(window_buckets: WindowBuckets = 6) -> OverviewAnswer:
        """The platform over the last `window_buckets` speed buckets (the current one counted up to
        now): events accepted and views counted a second, per bucket too; the refused views by
        reason and their share of the judged views; the counter's lag per partition of the events
        topic; the served batch run and its age; the top videos by views in the window, each with
        its total as the stats route serves it, and the fastest rising. `scopes` says which
        figures are the speed layer's over the window (not totals, not corrected by a batch)."""
        now = now_ms()
        first, last, _, _ = trends.windows(now, bucket_ms, window_buckets, 0)
        degraded: list[str] = []
        ends, broker_trouble = await end_offsets.get()
        milestones, store_trouble = await milestones_recorded_last()
        if store_trouble is not None:
            degraded.append(store_trouble)
        try:
            buckets = await _per_bucket(redis, first, last)
            top = await top_videos(redis, first, last, TOP_VIDEOS)
            rising = await rising_videos(
                redis, now, bucket_ms, window_buckets, trends.DEFAULT_BASELINE_BUCKETS, TOP_VIDEOS
            )
            lag = await _consumer_lag(redis, settings, ends)
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(
                f"the overview needs the speed layer and Redis is not reachable at {settings.redis_url}: "
                f"start it with 'tally up' or set TALLY_REDIS_URL ({exc})"
            ) from exc
        if broker_trouble is not None:
            degraded.append(broker_trouble)
        behind = [str(p.partition) for p in lag.partitions if p.lag is not None and p.lag < 0]
        if behind:
            degraded.append(
                f"the broker's end offset is below what the counter counted on partition "
                f"{', '.join(behind)}: the broker lost records or is not the one the counter read"
            )
        # Each top video's total is the stats route's answer (cached as it is), not a sum made here.
        served = await asyncio.gather(*(reader.stats(video) for video, _ in top))
        totals: dict[str, int] = {}
        for counts in buckets:
            for name, value in counts.items():
                totals[name] = totals.get(name, 0) + value
        window_secs = (now - rules.bucket_start(first, bucket_ms) + 1) / 1000
        batch = _freshness(baselines, now, settings.retention_ms)
        if batch is not None and batch.stale:
            degraded.append("baseline older than the speed retention: recent counts may be missing")
        return OverviewAnswer(
            window_buckets=window_buckets,
            bucket_ms=bucket_ms,
            from_ms=rules.bucket_start(first, bucket_ms),
            as_of=now,
            window_secs=window_secs,
            events=totals.get("events", 0),
            views=totals.get("views", 0),
            events_per_sec=totals.get("events", 0) / window_secs,
            views_per_sec=totals.get("views", 0) / window_secs,
            points=[
                OverviewPoint(
                    start_ms=rules.bucket_start(bucket, bucket_ms),
                    events=counts.get("events", 0),
                    views=counts.get("views", 0),
                    rejected=_rejected_total(counts),
                )
                for bucket, counts in enumerate(buckets, start=first)
            ],
            bot_share=_bot_share(totals),
            consumer_lag=lag,
            batch=batch,
            top=[
                TopVideo(video_id=v, views=stats["views"], window_views=n)
                for (v, n), stats in zip(top, served, strict=True)
            ],
            rising=rising,
            milestones=milestones,
            scopes=_scopes(window_buckets, bucket_ms),
            degraded=degraded,
        )

    return router


def _scopes(window_buckets: int, bucket_ms: int) -> OverviewScopes:
    """Every part is the speed layer's over the window, but the top videos' totals."""
    window = speed_window(window_buckets, bucket_ms)
    top = Scope(
        source="merged",
        window_buckets=None,
        text="views: each video's total, batch baseline + speed layer after its cutoff (as its stats); "
        f"listed by window_views, its speed-layer views in the last {window_buckets} buckets",
    )
    return OverviewScopes(counts=window, bot_share=window, top=top, rising=window)


async def _per_bucket(redis: Redis, first: int, last: int) -> list[dict[str, int]]:
    """The platform's counts of each bucket first..last, in order: `platform_counts` of each one (the
    chart shows every bucket, the totals are their sum), BUCKET_READS_IN_FLIGHT at a time."""
    gate = asyncio.Semaphore(BUCKET_READS_IN_FLIGHT)

    async def one(bucket: int) -> dict[str, int]:
        async with gate:
            return await platform_counts(redis, bucket, bucket)

    return list(await asyncio.gather(*(one(b) for b in range(first, last + 1))))


def _rejected_total(counts: dict[str, int]) -> int:
    return sum(n for name, n in counts.items() if name.startswith(_REJECTED))


def _bot_share(totals: dict[str, int]) -> BotShare:
    rejected = {
        name.removeprefix(_REJECTED): n for name, n in totals.items() if name.startswith(_REJECTED) and n
    }
    refused = sum(rejected.values())
    judged = totals.get("views", 0) + refused
    by_reason = [
        RefusedReason(reason=reason, views=n, share=n / judged)
        for reason, n in sorted(rejected.items(), key=lambda item: (-item[1], item[0]))
    ]
    share = refused / judged if judged else None
    return BotShare(judged_views=judged, rejected_views=refused, share=share, by_reason=by_reason)


async def _consumer_lag(redis: Redis, settings: Settings, ends: dict[int, int] | None) -> ConsumerLag:
    """Per partition of the events topic: the broker's end offset less the next offset the counter
    counts (its stored offset in Redis + 1); the partitions of the settings when the broker gave
    no end offsets."""
    topic = settings.events_topic
    partitions = sorted(ends) if ends is not None else list(range(settings.topic_partitions))
    async with redis.pipeline(transaction=False) as pipe:  # GETs, not MGET: one slot per partition
        for partition in partitions:
            pipe.get(keys.counter_offset(topic, partition))
        stored = await pipe.execute()
    rows = []
    for partition, raw in zip(partitions, stored, strict=True):
        next_offset = int(raw) + 1 if raw is not None else 0
        end = ends[partition] if ends is not None else None
        lag = end - next_offset if end is not None else None
        rows.append(PartitionLag(partition=partition, end_offset=end, next_offset=next_offset, lag=lag))
    total = sum(row.lag or 0 for row in rows) if ends is not None else None
    return ConsumerLag(topic=topic, total=total, partitions=rows)


def _freshness(baselines: BaselineCache, now: int, retention_ms: int) -> BatchFreshness | None:
    baseline = baselines.get()
    if baseline is None:
        return None
    return BatchFreshness(
        run_id=baseline.run_id,
        rules_version=baseline.rules_version,
        cutoff=baseline.cutoff,
        published_at=baseline.published_at,
        age_secs=(now - baseline.cutoff) / 1000,
        stale=now - baseline.cutoff > retention_ms,
    )
