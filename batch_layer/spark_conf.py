"""The batch's Spark settings, each with its default and why: measured on a 2-vCPU machine
(docs/decisions/0004-batch-jvm-settings.md); TALLY_SPARK_CONF overrides or adds to them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

# Why each value below, and what it bought.
DECISION = "docs/decisions/0004-batch-jvm-settings.md"


class SparkSetting(NamedTuple):
    """A Spark setting's default value and the one-line reason for it."""

    value: str
    reason: str


# A local master runs every task in the driver's JVM: room to keep the deduplicated log in memory
# (reserved, not committed).
LOCAL_DRIVER_MEMORY = "12g"
# A batch run is one short-lived JVM: C2 compiles only hotter methods (thresholds x4), with a
# smaller inlining budget.
LOCAL_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=3000 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=200000 "
    "-XX:FreqInlineSize=150 -XX:InlineSmallCode=1500"
)
# A run's old generation is mostly the kept log, alive to the end, so G1 marks it only from a fixed
# 80 % of the heap.
LOCAL_GC_OPTIONS = "-XX:-G1UseAdaptiveIHOP -XX:InitiatingHeapOccupancyPercent=80"
# The JVM options of a local master's driver, which runs the tasks.
LOCAL_JAVA_OPTIONS = f"{LOCAL_JIT_OPTIONS} {LOCAL_GC_OPTIONS}"

# The settings of every session, whatever its master.
SPARK_CONF: dict[str, SparkSetting] = {
    "spark.sql.shuffle.partitions": SparkSetting(
        "4", "two tasks a core of a 2-vCPU machine, not Spark's 200 tiny ones per shuffle"
    ),
    "spark.sql.optimizer.windowGroupLimitThreshold": SparkSetting(
        "-1",
        f"no group limit before the dedup shuffle: its sort of every split dropped almost no copies "
        f"({DECISION})",
    ),
    "spark.hadoop.parquet.filter.dictionary.enabled": SparkSetting(
        "false",
        f"the dictionary filter boxes whole dictionaries per row group and skips almost none; min/max "
        f"statistics (still on) prune the cutoff's range ({DECISION})",
    ),
    "spark.serializer": SparkSetting(
        "org.apache.spark.serializer.KryoSerializer",
        f"the kept log (`transform.classify`) is serialized: Kryo writes an UnsafeRow as its bytes, Java "
        f"serialization goes through ObjectOutputStream for every row ({DECISION})",
    ),
    "spark.kryo.referenceTracking": SparkSetting(
        "false", f"a kept row is its bytes, with no shared or cyclic references to track ({DECISION})"
    ),
    "spark.kryo.unsafe": SparkSetting(
        "true", f"unsafe input and output, measured together with reference tracking off ({DECISION})"
    ),
}

# The settings of a local master only, whose driver's JVM runs every task: a cluster's JVMs and
# heaps are its operators' (and none of these figures were measured there).
LOCAL_SPARK_CONF: dict[str, SparkSetting] = {
    "spark.driver.memory": SparkSetting(
        LOCAL_DRIVER_MEMORY,
        f"the kept log stays in memory and below G1's marking threshold; 1g spills it, 6g marks it "
        f"for 14-23 CPU-s a run ({DECISION})",
    ),
    "spark.driver.extraJavaOptions": SparkSetting(
        LOCAL_JAVA_OPTIONS,
        f"a short-lived JVM: C2 compiles only hotter methods with a smaller inlining budget, G1 marks "
        f"the kept log only from 80 % of the heap ({DECISION})",
    ),
}


def spark_conf(overrides: Mapping[str, str], local: bool) -> dict[str, str]:
    """The Spark settings of a batch session: the defaults (`SPARK_CONF`, and `LOCAL_SPARK_CONF` on a
    local master), then `overrides` (TALLY_SPARK_CONF) over them and added to them."""
    defaults = {**SPARK_CONF, **(LOCAL_SPARK_CONF if local else {})}
    return {**{key: setting.value for key, setting in defaults.items()}, **overrides}
