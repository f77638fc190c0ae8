"""The SparkSession of the batch layer, built from the settings (local mode by default)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from counting.settings import Settings

SHUFFLE_PARTITIONS = 4
APP_NAME = "tally-batch"
# A local master runs every task in the driver's JVM: room to keep the deduplicated log in memory
# (reserved, not committed). Why and measured: docs/decisions/0004-batch-jvm-settings.md.
LOCAL_DRIVER_MEMORY = "12g"
# A batch run is one short-lived JVM: C2 compiles only hotter methods (thresholds x4), with a
# smaller inlining budget. Why and measured: docs/decisions/0004-batch-jvm-settings.md.
LOCAL_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=3000 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=200000 "
    "-XX:FreqInlineSize=150 -XX:InlineSmallCode=1500"
)
# A run's old generation is mostly the kept log, alive to the end, so G1 marks it only from a fixed
# 80 % of the heap. Why and measured: docs/decisions/0004-batch-jvm-settings.md.
LOCAL_GC_OPTIONS = "-XX:-G1UseAdaptiveIHOP -XX:InitiatingHeapOccupancyPercent=80"
# The JVM options of a local master's driver, which runs the tasks.
LOCAL_JAVA_OPTIONS = f"{LOCAL_JIT_OPTIONS} {LOCAL_GC_OPTIONS}"

# The directory that holds the `batch_layer` and `counting` packages: Python workers of a local
# master import the rules from there. A cluster gets them through `spark-submit --py-files`.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def build_session(
    settings: Settings, app_name: str = APP_NAME, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession on `settings.spark_master`: UTC session time, few shuffle partitions, quiet logs;
    `conf` adds or overrides Spark settings (e.g. the event log, for profiling)."""
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.warehouse.dir", str((settings.data_dir / "spark-warehouse").resolve()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Why each setting below, and what it bought: docs/decisions/0004-batch-jvm-settings.md.
        # No group limit before the dedup shuffle: its sort of every split dropped almost no copies.
        .config("spark.sql.optimizer.windowGroupLimitThreshold", "-1")
        # Parquet's dictionary filter boxes whole dictionaries per row group and skips almost none;
        # min/max statistics (still on) prune the cutoff's range.
        .config("spark.hadoop.parquet.filter.dictionary.enabled", "false")
        # The narrow log is kept serialized (see `transform.classify`): Kryo writes an UnsafeRow as
        # its bytes, where Java serialization goes through ObjectOutputStream for every row.
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        # A kept row is its bytes, with no shared or cyclic references to track; unsafe input and
        # output on (measured together).
        .config("spark.kryo.referenceTracking", "false")
        .config("spark.kryo.unsafe", "true")
    )
    if settings.spark_master.startswith("local"):
        # Local Python workers run this interpreter (PySpark's default is `python3` on the PATH).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.executorEnv.PYTHONPATH", _PROJECT_ROOT)
        builder = builder.config("spark.driver.memory", LOCAL_DRIVER_MEMORY)
        builder = builder.config("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_for(settings: Settings, spark: SparkSession | None) -> tuple[SparkSession, bool]:
    """The session a job runs in and whether the job owns it (and stops it at the end): `spark` if
    given, else the process's active or default session (someone else's: left running; the
    active one is per thread, and a task may run in another thread than its process's session),
    else a new one."""
    if spark is not None:
        return spark, False
    try:
        return SparkSession.active(), False
    except PySparkRuntimeError:
        return build_session(settings), True


_BYPASS_PARTIAL_AGGREGATION = "spark.sql.execution.bypassPartialAggregation"


@contextmanager
def partial_aggregation_bypassed(spark: SparkSession) -> Iterator[None]:
    """Plan the aggregations of the actions run inside without their map-side partial step.

    For a grouping whose keys are nearly all distinct within an input split (an event id, an
    address and minute) the partial hash table merges nothing and costs as much as the final
    one. Every other aggregation keeps it, so the setting is scoped to the actions that need it
    (an eager action: the plan is made and run inside) and restored after.
    """
    before = spark.conf.get(_BYPASS_PARTIAL_AGGREGATION, "false")
    spark.conf.set(_BYPASS_PARTIAL_AGGREGATION, "true")
    try:
        yield
    finally:
        spark.conf.set(_BYPASS_PARTIAL_AGGREGATION, before or "false")
