"""Extract: the raw Parquet log below a cutoff, read with partition pruning by ingestion hour."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructField, StructType

from counting.logschema import LOG_COLUMNS

PARTITION_COLUMNS: tuple[str, ...] = ("ingest_date", "ingest_hour")
_TYPES: dict[str, DataType] = {"string": StringType(), "int64": LongType(), "double": DoubleType()}


def log_schema() -> StructType:
    """The Spark schema of the log's columns, in file order (no partition columns)."""
    return StructType([StructField(name, _TYPES[kind], nullable=True) for name, kind in LOG_COLUMNS])


def _read_schema() -> StructType:
    # Partition columns read as text, so "07" stays "07" and compares in hour order.
    partitions = [StructField(name, StringType(), nullable=True) for name in PARTITION_COLUMNS]
    return StructType([*log_schema().fields, *partitions])


def _partition_filter(cutoff_ms: int) -> Column:
    """Partitions that can hold rows ingested before the cutoff: up to the hour of `cutoff - 1 ms`.

    Assumes the archiver files each row under the UTC hour of its own `ingest_ts` or an earlier one.
    """
    last = datetime.fromtimestamp((cutoff_ms - 1) / 1000, tz=UTC)
    day, hour = last.strftime("%Y-%m-%d"), last.strftime("%H")
    return (F.col("ingest_date") < day) | ((F.col("ingest_date") == day) & (F.col("ingest_hour") <= hour))


def _has_parquet(raw_dir: Path) -> bool:
    # Spark skips files whose name starts with "." or "_" (temporary files of a writer).
    return raw_dir.is_dir() and any(not p.name.startswith((".", "_")) for p in raw_dir.rglob("*.parquet"))


def read_log(spark: SparkSession, raw_dir: Path, cutoff_ms: int) -> DataFrame:
    """The log rows with `ingest_ts < cutoff_ms` (an empty frame when there is no log yet)."""
    if not _has_parquet(raw_dir):
        return spark.createDataFrame([], log_schema())
    frame = (
        spark.read.schema(_read_schema())
        .option("basePath", str(raw_dir))
        .parquet(str(raw_dir))
        .where(_partition_filter(cutoff_ms))
        .where(F.col("ingest_ts") < F.lit(cutoff_ms))
    )
    return frame.select(*(name for name, _ in LOG_COLUMNS))
