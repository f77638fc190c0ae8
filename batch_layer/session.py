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
# A local master runs every task in the driver's JVM: give it room to keep the deduplicated log
# in memory (Spark's default of 1 GiB spills a 10-million-event log to disk). With 6 GiB, the kept
# log of 10 million events filled the heap past G1's marking threshold, and concurrent marking
# took 14-23 CPU-s of a 100 s run; with 12 GiB, 4-6 CPU-s. The heap is reserved, not committed.
LOCAL_DRIVER_MEMORY = "12g"
# A batch run is one short-lived JVM, and the C2 compiler took more than a quarter of its CPU
# (58 of 215 CPU-s on 10 million events, mostly Spark's generated classes, each new plan's
# compiled anew): compiled code of a run is used for a minute, not for hours. Raising the
# invocation counts before C2 takes a method (JDK defaults: 5,000 / 600 / 15,000 / 40,000) leaves
# the lukewarm ones to C1: C2 58 -> 36 CPU-s, task CPU unchanged. Lower thresholds (C1 only) or
# higher ones (10x) made the tasks slower than C2 saved. A smaller inlining budget for C2
# (methods up to 150 bytecodes inlined at hot call sites, not 325; callees compiled to less than
# 1,500 bytes of code, not 2,500) makes each compile of the large generated methods cheaper: C2
# 45-54 -> 26-30 CPU-s, task CPU unchanged, 3-8 % less wall time in interleaved runs.
LOCAL_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=3000 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=200000 "
    "-XX:FreqInlineSize=150 -XX:InlineSmallCode=1500"
)
# G1 starts marking the old generation concurrently once it holds a share of the heap that it
# adapts from earlier cycles. A batch run's old generation is mostly the kept log, alive until
# the run ends, so marking finds almost nothing to free; it took 1.3-6.6 CPU-s of a 10M run, and
# the runs that marked most were the slowest. Marking from 80 % of the heap (9.6 of 12 GiB) leaves
# it out of such a run and keeps it, with a fifth of the heap to spare, for a larger log. 10M
# events, four runs each, alternating: job mean 49.93 -> 47.63 s, JVM CPU 92.6 -> 87.9 s.
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
        # Retries are deduplicated by `row_number() == 1` per event_id. Spark's default adds a
        # group limit before the shuffle, which sorts every input split by event_id to drop the
        # copies within a split: they are rare (a retry lands in a later file), so that sort of
        # the whole log bought almost nothing.
        .config("spark.sql.optimizer.windowGroupLimitThreshold", "-1")
        # Parquet's dictionary filter reads and expands, for every row group and every scan, the
        # dictionary of each column a pushed predicate names (`type`, `ingest_ts`) into a hash set
        # of boxed values, to skip row groups that cannot match. Row groups of the log nearly all
        # hold views, and the cutoff is a range that the row groups' min/max statistics (still on)
        # prune by. Off: 100 -> 88 task CPU-s on 10 million events.
        .config("spark.hadoop.parquet.filter.dictionary.enabled", "false")
        # The narrow log is kept serialized (see `transform.classify`): Kryo writes an UnsafeRow as
        # its bytes, where Java serialization goes through ObjectOutputStream for every row.
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        # Kryo resets its reference tables after every top-level object, so reading the kept log
        # back cleared two identity maps per row (`MapReferenceResolver.reset`: 4.7 % of the task
        # threads' samples of a 10M run). A row is its bytes, with no shared or cyclic references
        # to track. With tracking off and Kryo's unsafe input and output on (measured together),
        # 10M events, five alternating runs from new JVMs: job median 51.09 -> 49.51 s, JVM CPU
        # mean 102.5 -> 99.4 s.
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
