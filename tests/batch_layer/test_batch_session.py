"""`batch_layer.session`: the JVM of a local session runs with the session's Java options."""

from __future__ import annotations

from pyspark.sql import SparkSession

from batch_layer.spark_conf import LOCAL_JAVA_OPTIONS


def _vm_option(spark: SparkSession, name: str) -> str:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class)
    return str(bean.getVMOption(name).getValue())


def test_the_local_jvm_marks_the_old_generation_late_and_compiles_with_the_smaller_budget(
    spark: SparkSession,
) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())

    assert set(LOCAL_JAVA_OPTIONS.split()) <= set(arguments)
    # What the JVM took from them: G1 marks from a fixed 80 % of the heap, C2 inlines less.
    assert _vm_option(spark, "UseG1GC") == "true"
    assert _vm_option(spark, "G1UseAdaptiveIHOP") == "false"
    assert _vm_option(spark, "InitiatingHeapOccupancyPercent") == "80"
    assert _vm_option(spark, "FreqInlineSize") == "150"
    assert _vm_option(spark, "Tier4InvocationThreshold") == "20000"
