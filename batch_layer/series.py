"""Per-bucket counts of each video from the classified events, and the history tiers (1-minute and
1-hour steps of ingestion time): the batch side of the timeseries."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from batch_layer.columns import COUNTED, REJECTED, SHORT, is_view
from batch_layer.load import write_sorted
from batch_layer.totals import grain_counts
from counting.batchpaths import TIERS, series_path, tier_path
from counting.settings import Settings

# The counts of every series, per (video, bucket) or (video, step start).
COUNTS = ("views", "rejected", "short_views")


def _sums(frame: DataFrame, *key: str | Column) -> DataFrame:
    return frame.groupBy(*key).agg(
        *(F.coalesce(F.sum(name), F.lit(0)).cast("long").alias(name) for name in COUNTS)
    )


def bucket_totals(grain: DataFrame) -> DataFrame:
    """Counted, rejected and short views per (video, ingestion bucket), added up from
    `grain_counts` with a bucket size: the bucket of the view that counted, exactly as the speed
    layer files its deltas."""
    return _sums(grain.where(F.col("is_view")), "video_id", "bucket")


def bucket_video_counts(classified: DataFrame, bucket_ms: int) -> DataFrame:
    """`bucket_totals` of classified events."""
    return bucket_totals(grain_counts(classified, bucket_ms))


def step_totals(grain: DataFrame, classified: DataFrame, bucket_ms: int, step_ms: int) -> DataFrame:
    """Counted, rejected and short views per (video, `start_ms`), `start_ms` the start of the
    `step_ms` of ingestion time holding the view (the tier of a step, as `bucket_totals` is the
    series of a bucket).

    A step made of whole buckets adds up from `grain_counts` (kept, small); a step finer than the
    bucket (or not a multiple of it) is counted from the classified views (one narrow aggregate)."""
    if step_ms % bucket_ms == 0:
        per_step = step_ms // bucket_ms
        bucket = F.col("bucket")
        start = ((bucket - F.pmod(bucket, F.lit(per_step))) * F.lit(bucket_ms)).cast("long")
        return _sums(bucket_totals(grain), "video_id", start.alias("start_ms"))
    ingest_ts = F.col("ingest_ts")
    outcome = F.col("outcome")
    start = (ingest_ts - F.pmod(ingest_ts, F.lit(step_ms))).cast("long")
    return (
        classified.where(is_view())
        .groupBy("video_id", start.alias("start_ms"))
        .agg(
            F.count_if(outcome == COUNTED).cast("long").alias("views"),
            F.count_if(outcome == REJECTED).cast("long").alias("rejected"),
            F.count_if(outcome == SHORT).cast("long").alias("short_views"),
        )
    )


def write_series(settings: Settings, run_id: str, series: DataFrame) -> Path:
    """Overwrite the run's per-bucket counts (one Parquet folder, sorted for stable bytes)."""
    return write_sorted(series, series_path(settings, run_id), "video_id", "bucket")


def write_tiers(settings: Settings, run_id: str, grain: DataFrame, classified: DataFrame) -> list[Path]:
    """Overwrite the run's history tiers (`TIERS`): per (video, step start), one Parquet folder
    each, sorted for stable bytes. Every step of the log is written; the serving layer answers
    only those within the tier's retention (`history_*_retention_ms`)."""
    return [
        write_sorted(
            step_totals(grain, classified, settings.bucket_ms, tier.step_ms),
            tier_path(settings, run_id, tier),
            "video_id",
            "start_ms",
        )
        for tier in TIERS
    ]
