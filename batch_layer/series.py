"""Per-bucket counts of each video from the classified events: the batch side of the timeseries."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from batch_layer.transform import COUNTED, REJECTED, SHORT, floor_div
from counting.settings import Settings

SERIES_DIR = "bucket_video"


def bucket_video_counts(classified: DataFrame, bucket_ms: int) -> DataFrame:
    """Counted, rejected and short views per (video, ingestion bucket): the bucket of the view
    that counted, exactly as the speed layer files its deltas."""
    outcome = F.col("outcome")
    return (
        classified.where(F.col("type") == "view")
        .withColumn("bucket", floor_div("ingest_ts", bucket_ms))
        .groupBy("video_id", "bucket")
        .agg(
            F.count_if(outcome == COUNTED).alias("views"),
            F.count_if(outcome == REJECTED).alias("rejected"),
            F.count_if(outcome == SHORT).alias("short_views"),
        )
    )


def series_path(settings: Settings, run_id: str) -> Path:
    return settings.batch_dir / run_id / SERIES_DIR


def write_series(settings: Settings, run_id: str, series: DataFrame) -> Path:
    """Overwrite the run's per-bucket counts (one Parquet folder, sorted for stable bytes)."""
    path = series_path(settings, run_id)
    series.orderBy("video_id", "bucket").coalesce(1).write.mode("overwrite").parquet(str(path))
    return path
