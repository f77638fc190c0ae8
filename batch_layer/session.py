"""The SparkSession of the batch layer, built from the settings (local mode by default)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from counting.settings import Settings

SHUFFLE_PARTITIONS = 4
APP_NAME = "tally-batch"
# A local master runs every task in the driver's JVM: give it room to keep the deduplicated log
# in memory (Spark's default of 1 GiB spills a 10-million-event log to disk).
LOCAL_DRIVER_MEMORY = "6g"

# The directory that holds the `batch_layer` and `counting` packages: Python workers of a local
# master import the rules from there. A cluster gets them through `spark-submit --py-files`.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def build_session(settings: Settings, app_name: str = APP_NAME) -> SparkSession:
    """A SparkSession on `settings.spark_master`: UTC session time, few shuffle partitions, quiet logs."""
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.warehouse.dir", str((settings.data_dir / "spark-warehouse").resolve()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if settings.spark_master.startswith("local"):
        # Local Python workers run this interpreter (PySpark's default is `python3` on the PATH).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.executorEnv.PYTHONPATH", _PROJECT_ROOT)
        builder = builder.config("spark.driver.memory", LOCAL_DRIVER_MEMORY)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
