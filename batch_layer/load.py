"""Load: write a run's outputs aside (baseline table, daily per-video counts), then publish."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from counting.settings import Settings
from warehouse.baseline import baseline_schema, publish_baseline, write_table

BASELINE_FILE = "baseline.parquet"


def baseline_path(settings: Settings, run_id: str) -> Path:
    return settings.baselines_dir / run_id / BASELINE_FILE


def daily_path(settings: Settings, run_id: str) -> Path:
    return settings.data_dir / "batch" / run_id / "daily_video"


def baseline_table(video_counts: DataFrame) -> pa.Table:
    """The per-video counts as an Arrow table of the baseline schema, ordered by video_id.

    Collected on the driver: one small row per video.
    """
    rows = [row.asDict() for row in video_counts.orderBy("video_id").collect()]
    return pa.Table.from_pylist(rows, schema=baseline_schema())


def write_baseline(settings: Settings, run_id: str, table: pa.Table) -> Path:
    """Write the table aside at `baselines/<run_id>/baseline.parquet` (readers do not see it yet)."""
    path = baseline_path(settings, run_id)
    write_table(path, table)
    return path


def write_daily(settings: Settings, run_id: str, rules_version: str, daily: DataFrame) -> Path:
    """Overwrite the run's per-day per-video counts, each row recording the run and rules version."""
    path = daily_path(settings, run_id)
    stamped = daily.withColumn("run_id", F.lit(run_id)).withColumn("rules_version", F.lit(rules_version))
    stamped.orderBy("date", "video_id").coalesce(1).write.mode("overwrite").parquet(str(path))
    return path


def publish(settings: Settings, run_id: str, cutoff_ms: int, rules_version: str, published_at: int) -> None:
    """The one switch: readers move to this run's baseline together with its cutoff."""
    publish_baseline(settings.baselines_dir, run_id, cutoff_ms, rules_version, published_at)
