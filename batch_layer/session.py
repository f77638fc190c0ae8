"""The SparkSession of the batch layer, built from the settings (local mode by default)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException, PySparkRuntimeError
from pyspark.sql import SparkSession

from batch_layer.spark_conf import spark_conf

# Kept here too for `bench.batch_stages`, which adds a recording option to the JVM options.
from counting.settings import Settings

APP_NAME = "tally-batch"

# The directory that holds the `batch_layer` and `counting` packages: Python workers of a local
# master import the rules from there. A cluster gets them through `spark-submit --py-files`.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def build_session(
    settings: Settings, app_name: str = APP_NAME, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession on `settings.spark_master`: UTC session time, quiet logs, the tuned Spark
    settings of `batch_layer.spark_conf` with `settings.spark_conf` (TALLY_SPARK_CONF) over them;
    `conf` adds or overrides Spark settings last (e.g. the event log, for profiling)."""
    local = settings.spark_master.startswith("local")
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str((settings.data_dir / "spark-warehouse").resolve()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if local:
        # Local Python workers run this interpreter (PySpark's default is `python3` on the PATH).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.executorEnv.PYTHONPATH", _PROJECT_ROOT)
    # The tuned settings (each one's reason: `batch_layer.spark_conf`), TALLY_SPARK_CONF's over them.
    for key, value in {**spark_conf(settings.spark_conf, local), **(conf or {})}.items():
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


def stop_session(session: SparkSession) -> None:
    """Stop a session a job owns; a session whose JVM is already gone (a killed run) is logged, not
    raised, so the job's own error (the previous baseline stays published) is the one reported."""
    try:
        session.stop()
    except (PySparkException, Py4JError, OSError) as exc:
        logging.getLogger(__name__).warning("spark session not stopped cleanly (its JVM is gone?): %r", exc)


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
