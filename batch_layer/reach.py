"""A creator's reach: the distinct viewers of the counted views of any of its videos, as of the
run's cutoff (the batch side of `GET /v1/creators/{id}/stats`; `counting.oracle.creator_counts`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch_layer.columns import COUNTED
from batch_layer.load import write_sorted
from counting.batchpaths import creator_viewers_path
from counting.catalog import CatalogRow
from counting.settings import Settings


def creator_viewers(spark: SparkSession, classified: DataFrame, videos: Iterable[CatalogRow]) -> DataFrame:
    """(creator_id, unique_viewers) of every creator of the catalog with counted views."""
    owners = spark.createDataFrame(
        [(v.video_id, v.creator_id) for v in videos], "video_id string, creator_id string"
    )
    return (
        classified.where(F.col("outcome") == COUNTED)
        .join(F.broadcast(owners), "video_id")
        .groupBy("creator_id")
        .agg(F.countDistinct("viewer").cast("long").alias("unique_viewers"))
    )


def write_creator_viewers(settings: Settings, run_id: str, reach: DataFrame) -> Path:
    """Overwrite the run's creator reach (one Parquet folder, sorted for stable bytes)."""
    return write_sorted(reach, creator_viewers_path(settings, run_id), "creator_id")
