"""Per-bucket counts of each video from the classified events: the batch side of the timeseries."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from batch_layer.load import write_sorted
from batch_layer.transform import grain_counts
from counting.settings import Settings

SERIES_DIR = "bucket_video"


def bucket_totals(grain: DataFrame) -> DataFrame:
    """Counted, rejected and short views per (video, ingestion bucket), added up from
    `grain_counts` with a bucket size: the bucket of the view that counted, exactly as the speed
    layer files its deltas."""
    return (
        grain.where(F.col("is_view"))
        .groupBy("video_id", "bucket")
        .agg(
            *(
                F.coalesce(F.sum(name), F.lit(0)).cast("long").alias(name)
                for name in ("views", "rejected", "short_views")
            )
        )
    )


def bucket_video_counts(classified: DataFrame, bucket_ms: int) -> DataFrame:
    """`bucket_totals` of classified events."""
    return bucket_totals(grain_counts(classified, bucket_ms))


def series_path(settings: Settings, run_id: str) -> Path:
    return settings.batch_dir / run_id / SERIES_DIR


def write_series(settings: Settings, run_id: str, series: DataFrame) -> Path:
    """Overwrite the run's per-bucket counts (one Parquet folder, sorted for stable bytes)."""
    return write_sorted(series, series_path(settings, run_id), "video_id", "bucket")
