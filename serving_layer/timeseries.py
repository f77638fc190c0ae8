"""Counts of a video over a range, per speed bucket or per step of a history tier (1 minute, 1
hour): exact batch points before the cutoff, speed points from it on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from redis.asyncio import Redis

from counting import keys, rules
from counting.settings import Settings
from counting.signals import REASONS
from serving_layer.baselines import BaselineCache, BucketCounts
from serving_layer.stats import REDIS_ERRORS

MAX_BUCKETS = 2_000  # the most points one answer holds (buckets, or steps of a tier)
DEFAULT_BUCKETS = 60  # the buckets of a timeseries asked without a range

Step = Literal["1m", "1h"]
STEPS: dict[str, int] = {"1m": rules.MINUTE_MS, "1h": rules.HOUR_MS}
# The setting that holds each tier's retention.
RETENTION_SETTINGS: dict[str, str] = {"1m": "history_minute_retention_ms", "1h": "history_hour_retention_ms"}

_REJECTED_FIELDS = frozenset(f"rejected:{r}".encode() for r in REASONS)
_NONE = BucketCounts()
Point = dict[str, Any]


@dataclass(frozen=True)
class Window:
    """A range as asked: `start` (ms, inclusive), `end` (ms, exclusive), how many points."""

    start: int | None = None
    end: int | None = None
    count: int | None = None


@dataclass(frozen=True)
class Refused:
    """A refused parameter and the reason (a 422 answer)."""

    field: str
    reason: str


def span_of(window: Window, width_ms: int, now_ms: int, noun: str = "buckets") -> tuple[int, int] | Refused:
    """The points [first, end) of `width_ms` that `window` asks for: from `start` on, or up to `end`
    (default: the one holding now), `count` of them (default `DEFAULT_BUCKETS`)."""
    if window.start is not None and window.end is not None and window.count is not None:
        return Refused("buckets", "give at most two of start, end and buckets")
    if window.start is not None and window.end is not None and window.end <= window.start:
        return Refused("end", f"must be after start (got start={window.start}, end={window.end})")
    end = -(-window.end // width_ms) if window.end is not None else now_ms // width_ms + 1
    if window.start is not None:
        first = window.start // width_ms
        if window.count is not None:
            end = first + window.count
    else:
        first = end - (window.count or DEFAULT_BUCKETS)
    if end <= first:
        return Refused("end", f"must be after start (got start={window.start}, end={window.end})")
    if end - first > MAX_BUCKETS:
        return Refused("start", f"range spans more than {MAX_BUCKETS} {noun} of {width_ms} ms")
    return max(first, 0), end


def retention_of(settings: Settings, step: Step) -> int:
    """How far back from now the tier of `step` is answered (ms)."""
    return int(getattr(settings, RETENTION_SETTINGS[step]))


async def series_answer(
    redis: Redis,
    baselines: BaselineCache,
    settings: Settings,
    video_id: str,
    window: Window,
    step: Step | None,
    now_ms: int,
) -> dict[str, Any] | Refused:
    """The timeseries answer: without `step`, one point per speed bucket (`read_series`); with it,
    one per step of its tier (`read_steps`), within the tier's retention. Redis away: only the
    batch side, `approx`."""
    bucket_ms = settings.bucket_ms
    if step is None:
        span = span_of(window, bucket_ms, now_ms)
        if isinstance(span, Refused):
            return span
        first, end = span
        points, approx = await _with_fallback(
            redis, lambda r: read_series(r, baselines, video_id, first, end, bucket_ms)
        )
        return {"video_id": video_id, "bucket_ms": bucket_ms, "points": points, "approx": approx}
    step_ms = STEPS[step]
    span = span_of(window, step_ms, now_ms, "steps")
    if isinstance(span, Refused):
        return span
    retention = retention_of(settings, step)
    oldest = -(-(now_ms - retention) // step_ms) * step_ms  # the first step starting within it
    first, end = span
    if end * step_ms <= oldest:
        variable = f"TALLY_{RETENTION_SETTINGS[step].upper()}"
        return Refused(
            "start",
            f"{step} points are kept for {retention} ms ({variable}): the oldest starts at {oldest}, "
            f"the range ends at {end * step_ms}; ask from {oldest} on, or for a coarser step",
        )
    first = max(first, oldest // step_ms)
    points, approx = await _with_fallback(
        redis, lambda r: read_steps(r, baselines, video_id, step_ms, first, end, bucket_ms, oldest)
    )
    return {
        "video_id": video_id,
        "step": step,
        "step_ms": step_ms,
        "bucket_ms": bucket_ms,
        "retention_ms": retention,
        "oldest_ms": oldest,
        "points": points,
        "approx": approx,
    }


async def _with_fallback(
    redis: Redis, read: Callable[[Redis | None], Awaitable[list[Point]]]
) -> tuple[list[Point], bool]:
    """`read` with Redis; if Redis fails, without it (the batch side only), and True."""
    try:
        return await read(redis), False
    except REDIS_ERRORS:
        return await read(None), True


def _of_bucket(bucket: int, bucket_ms: int, counts: BucketCounts, source: str) -> Point:
    """The point of one bucket: from its start, `bucket_ms` wide."""
    return _point(rules.bucket_start(bucket, bucket_ms), bucket_ms, counts, source)


def _point(start_ms: int, width_ms: int, counts: BucketCounts, source: str) -> Point:
    return {
        "start_ms": start_ms,
        "width_ms": width_ms,
        "views": counts.views,
        "rejected": counts.rejected,
        "short_views": counts.short_views,
        "source": source,
    }


def _counts(values: Mapping[bytes, bytes]) -> BucketCounts:
    """A speed bucket's counts from its hash (`keys.bucket_counts`)."""
    return BucketCounts(
        int(values.get(b"views", 0)),
        sum(int(v) for k, v in values.items() if k in _REJECTED_FIELDS),
        int(values.get(b"short_views", 0)),
    )


def _add(a: BucketCounts, b: BucketCounts) -> BucketCounts:
    return BucketCounts(a.views + b.views, a.rejected + b.rejected, a.short_views + b.short_views)


async def read_series(
    redis: Redis | None,
    baselines: BaselineCache,
    video_id: str,
    start_bucket: int,
    end_bucket: int,
    bucket_ms: int,
) -> list[Point]:
    """One point per bucket in [start_bucket, end_bucket): views, rejected, short views and the
    layer it came from. `redis` None: only the batch side (Redis away)."""
    baseline = baselines.get()
    first_speed = rules.bucket_of(baseline.cutoff, bucket_ms) if baseline else 0
    batch = baselines.series(video_id)
    points = [
        {
            "bucket": bucket,
            **_point(rules.bucket_start(bucket, bucket_ms), bucket_ms, batch.get(bucket, _NONE), "batch"),
        }
        for bucket in range(start_bucket, min(end_bucket, first_speed))
    ]
    speed_buckets = list(range(max(start_bucket, first_speed), end_bucket))
    if not speed_buckets or redis is None:
        return points
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in speed_buckets:
            pipe.hgetall(keys.bucket_counts(video_id, bucket))
        hashes = await pipe.execute()
    for bucket, values in zip(speed_buckets, hashes, strict=True):
        points.append(
            {
                "bucket": bucket,
                **_point(rules.bucket_start(bucket, bucket_ms), bucket_ms, _counts(values), "speed"),
            }
        )
    return points


async def _speed_buckets(redis: Redis, video_id: str, first: int, end: int) -> dict[int, BucketCounts]:
    """The video's speed buckets in [first, end) that hold deltas (its buckets index), by bucket."""
    if end <= first:
        return {}
    members = await redis.zrangebyscore(keys.buckets_index(video_id), first, end - 1)
    found = [int(b) for b in cast(list[bytes], members)]
    if not found:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in found:
            pipe.hgetall(keys.bucket_counts(video_id, bucket))
        hashes = await pipe.execute()
    return {bucket: _counts(values) for bucket, values in zip(found, hashes, strict=True)}


def _by_step(per_bucket: Mapping[int, BucketCounts], bucket_ms: int, step_ms: int) -> dict[int, BucketCounts]:
    """Counts per bucket summed into steps (`step_ms` a multiple of `bucket_ms`), by step start."""
    steps: dict[int, BucketCounts] = {}
    for bucket, counts in per_bucket.items():
        start = rules.bucket_start(bucket, bucket_ms) // step_ms * step_ms
        steps[start] = _add(steps.get(start, _NONE), counts)
    return steps


def _bucket_points(
    per_bucket: Mapping[int, BucketCounts], first: int, end: int, bucket_ms: int, source: str
) -> list[Point]:
    return [
        _point(rules.bucket_start(b, bucket_ms), bucket_ms, per_bucket.get(b, _NONE), source)
        for b in range(first, end)
    ]


async def read_steps(
    redis: Redis | None,
    baselines: BaselineCache,
    video_id: str,
    step_ms: int,
    first: int,
    end: int,
    bucket_ms: int,
    oldest_ms: int = 0,
) -> list[Point]:
    """Points of `step_ms` over the steps [first, end), each with its start and width.

    Before the cutoff C, the batch's tier of that step (a point holding C covers only its part
    before C: its width says so). From C on, the speed buckets: summed into steps when the step is
    made of whole buckets (the step holding C then adds them to the batch's part, `speed`); else
    one point per bucket, `bucket_ms` wide. A run without the tier answers from its per-bucket
    series the same way. Points starting before `oldest_ms` are left out. `redis` None: only the
    batch side (Redis away)."""
    baseline = baselines.get()
    cutoff = baseline.cutoff if baseline else 0
    lo, hi = first * step_ms, end * step_ms
    summed = step_ms % bucket_ms == 0
    tier: dict[int, BucketCounts] | None = {}
    if lo < cutoff:
        tier = await asyncio.to_thread(baselines.tier, video_id, step_ms, oldest_ms)
        if tier is None and summed:  # a run made before the tiers: its buckets add up the same
            tier = _by_step(baselines.series(video_id), bucket_ms, step_ms)
    first_speed = rules.bucket_of(max(lo, cutoff), bucket_ms)
    end_speed = rules.bucket_after(hi, bucket_ms)
    speed = None if redis is None else await _speed_buckets(redis, video_id, first_speed, end_speed)

    points: list[Point] = []
    if tier is None:  # no tier and steps finer than the buckets: the run's buckets as they are
        last = min(rules.bucket_of(cutoff, bucket_ms), rules.bucket_after(hi, bucket_ms))
        first_bucket = rules.bucket_of(lo, bucket_ms)
        points += _bucket_points(baselines.series(video_id), first_bucket, last, bucket_ms, "batch")
    else:
        speed_steps = _by_step(speed, bucket_ms, step_ms) if summed and speed is not None else {}
        for index in range(first, end):
            start = index * step_ms
            merged = speed is not None and summed and start + step_ms > cutoff
            if start >= cutoff and not merged:
                break
            counts = tier.get(start, _NONE) if start < cutoff else _NONE
            if merged:
                counts = _add(counts, speed_steps.get(start, _NONE))
                points.append(_point(start, step_ms, counts, "speed"))
            else:
                points.append(_point(start, min(step_ms, cutoff - start), counts, "batch"))
    if speed is not None and not summed:
        points += _bucket_points(speed, first_speed, end_speed, bucket_ms, "speed")
    return [p for p in points if p["start_ms"] >= oldest_ms]
