"""Per-bucket counts of a video over a range: exact batch buckets before the cutoff, speed buckets
from it on."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from counting import keys
from counting.bots import REASONS
from serving_layer.baselines import BaselineCache

MAX_BUCKETS = 2_000
DEFAULT_BUCKETS = 60  # the buckets of a timeseries asked without a range


async def read_series(
    redis: Redis | None,
    baselines: BaselineCache,
    video_id: str,
    start_bucket: int,
    end_bucket: int,
    bucket_ms: int,
) -> list[dict[str, Any]]:
    """One point per bucket in [start_bucket, end_bucket): views, rejected, short views and the
    layer it came from. `redis` None: only the batch side (Redis away)."""
    baseline = baselines.get()
    first_speed = baseline.cutoff // bucket_ms if baseline else 0
    batch = baselines.series(video_id)
    points: list[dict[str, Any]] = []
    for bucket in range(start_bucket, min(end_bucket, first_speed)):
        counts = batch.get(bucket)
        points.append(
            {
                "bucket": bucket,
                "start_ms": bucket * bucket_ms,
                "views": counts.views if counts else 0,
                "rejected": counts.rejected if counts else 0,
                "short_views": counts.short_views if counts else 0,
                "source": "batch",
            }
        )
    speed_buckets = list(range(max(start_bucket, first_speed), end_bucket))
    if not speed_buckets or redis is None:
        return points
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in speed_buckets:
            pipe.hgetall(keys.bucket_counts(video_id, bucket))
        hashes = await pipe.execute()
    rejected_fields = {f"rejected:{r}".encode() for r in REASONS}
    for bucket, values in zip(speed_buckets, hashes, strict=True):
        points.append(
            {
                "bucket": bucket,
                "start_ms": bucket * bucket_ms,
                "views": int(values.get(b"views", 0)),
                "rejected": sum(int(v) for k, v in values.items() if k in rejected_fields),
                "short_views": int(values.get(b"short_views", 0)),
                "source": "speed",
            }
        )
    return points
