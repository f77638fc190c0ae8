"""Load: write a run's outputs aside (baseline table, daily per-video counts), then publish."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from counting.batchpaths import baseline_path, daily_path
from counting.settings import Settings
from warehouse.baseline import baseline_schema, publish_baseline, write_table


def baseline_table(video_counts: DataFrame) -> pa.Table:
    """The per-video counts as an Arrow table of the baseline schema, ordered by video_id.

    Collected on the driver (one small row per video) as Arrow and sorted there: the byte order
    of the ids, as Spark's would be, without the sampling job and shuffle of a global sort.
    """
    schema = baseline_schema()
    return video_counts.select(*schema.names).toArrow().cast(schema).sort_by("video_id")


def write_baseline(settings: Settings, run_id: str, table: pa.Table) -> Path:
    """Write the table aside at `baselines/<run_id>/baseline.parquet` (readers do not see it yet)."""
    path = baseline_path(settings, run_id)
    write_table(path, table)
    return path


def write_sorted(frame: DataFrame, path: Path, *key: str) -> Path:
    """Overwrite `path` with one Parquet file of the rows in `key` order (a rerun writes the same
    rows in the same order; `key` must be unique per row).

    One partition sorted in place, not a global `orderBy`: that samples its input in a job of
    its own to plan a range partitioning, which one output file does not need.
    """
    frame.repartition(1).sortWithinPartitions(*key).write.mode("overwrite").parquet(str(path))
    return path


def write_daily(settings: Settings, run_id: str, rules_version: str, daily: DataFrame) -> Path:
    """Overwrite the run's per-day per-video counts, each row recording the run and rules version."""
    stamped = daily.withColumn("run_id", F.lit(run_id)).withColumn("rules_version", F.lit(rules_version))
    return write_sorted(stamped, daily_path(settings, run_id), "date", "video_id")


def publish(settings: Settings, run_id: str, cutoff_ms: int, rules_version: str, published_at: int) -> None:
    """The one switch: readers move to this run's baseline together with its cutoff."""
    publish_baseline(settings.baselines_dir, run_id, cutoff_ms, rules_version, published_at)
