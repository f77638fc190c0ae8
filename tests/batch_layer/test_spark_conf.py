"""`batch_layer.spark_conf` and TALLY_SPARK_CONF: the tuned defaults, what the setting overrides or
adds, the error on a bad value, and a session built with an override."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession

from batch_layer.session import build_session
from batch_layer.spark_conf import (
    DECISION,
    LOCAL_JAVA_OPTIONS,
    LOCAL_SPARK_CONF,
    SPARK_CONF,
    spark_conf,
)
from counting.settings import Settings, settings_env


def test_the_defaults_hold_the_tuned_settings_each_with_a_reason() -> None:
    local = spark_conf({}, local=True)
    cluster = spark_conf({}, local=False)

    assert local["spark.driver.memory"] == "12g"
    assert local["spark.driver.extraJavaOptions"] == LOCAL_JAVA_OPTIONS
    assert local["spark.sql.optimizer.windowGroupLimitThreshold"] == "-1"
    assert local["spark.hadoop.parquet.filter.dictionary.enabled"] == "false"
    assert local["spark.serializer"] == "org.apache.spark.serializer.KryoSerializer"
    assert local["spark.kryo.referenceTracking"] == "false"
    assert local["spark.kryo.unsafe"] == "true"
    assert local["spark.sql.shuffle.partitions"] == "4"
    # A cluster's JVMs and heaps are its operators': only the Spark settings go there.
    assert "spark.driver.memory" not in cluster
    assert "spark.driver.extraJavaOptions" not in cluster
    assert cluster["spark.serializer"] == "org.apache.spark.serializer.KryoSerializer"
    for setting in {**SPARK_CONF, **LOCAL_SPARK_CONF}.values():
        assert setting.reason.strip()
    measured = [
        key for key, setting in {**SPARK_CONF, **LOCAL_SPARK_CONF}.items() if DECISION in setting.reason
    ]
    assert set(measured) == set(LOCAL_SPARK_CONF) | set(SPARK_CONF) - {"spark.sql.shuffle.partitions"}
    assert (Path(__file__).resolve().parents[2] / DECISION).is_file()


def test_an_override_wins_and_an_added_setting_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_SPARK_CONF", '{"spark.driver.memory": "6g", "spark.eventLog.enabled": "true"}')
    settings = Settings()

    assert settings.spark_conf == {"spark.driver.memory": "6g", "spark.eventLog.enabled": "true"}
    conf = spark_conf(settings.spark_conf, local=True)
    assert conf["spark.driver.memory"] == "6g"
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.kryo.unsafe"] == "true"  # the other defaults stay


def test_without_the_variable_there_is_no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_SPARK_CONF", raising=False)
    assert Settings().spark_conf == {}


def test_the_overrides_travel_as_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(spark_conf={"spark.sql.shuffle.partitions": "8"})
    env = settings_env(settings)

    assert env["TALLY_SPARK_CONF"] == '{"spark.sql.shuffle.partitions": "8"}'
    monkeypatch.setenv("TALLY_SPARK_CONF", env["TALLY_SPARK_CONF"])
    assert Settings().spark_conf == {"spark.sql.shuffle.partitions": "8"}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("spark.driver.memory=6g", "'spark.driver.memory=6g'"),
        ('{"spark.driver.memory": "6g"', '\'{"spark.driver.memory": "6g"\''),
        ('["spark.driver.memory", "6g"]', '\'["spark.driver.memory", "6g"]\''),
        ('{"spark.sql.shuffle.partitions": 8}', "'spark.sql.shuffle.partitions': 8"),
        ('{"spark.kryo.unsafe": true}', "'spark.kryo.unsafe': True"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_the_value_and_an_example(
    monkeypatch: pytest.MonkeyPatch, value: str, named: str
) -> None:
    monkeypatch.setenv("TALLY_SPARK_CONF", value)
    with pytest.raises(ValidationError) as refused:
        Settings()

    message = str(refused.value)
    assert "TALLY_SPARK_CONF must" in message
    assert named in message
    assert (
        """e.g. TALLY_SPARK_CONF='{"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "6g"}'"""
        in message
    )


@pytest.fixture
def shuffle_partitions_restored(spark: SparkSession) -> Iterator[SparkSession]:
    """The session's shuffle partitions and the added setting put back after the test (the session is
    shared by every Spark test)."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    yield spark
    spark.conf.set("spark.sql.shuffle.partitions", before)
    spark.conf.unset("spark.tally.test.marker")


@pytest.mark.integration
@pytest.mark.slow
def test_a_session_built_with_the_setting_carries_the_override(
    shuffle_partitions_restored: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "TALLY_SPARK_CONF", '{"spark.sql.shuffle.partitions": "3", "spark.tally.test.marker": "overridden"}'
    )
    settings = Settings(data_dir=tmp_path, spark_master="local[2]")

    # The process's session is reused (`getOrCreate`), with the setting's runtime values applied.
    built = build_session(settings, app_name="tally-tests")

    assert built is shuffle_partitions_restored
    assert built.conf.get("spark.sql.shuffle.partitions") == "3"
    assert built.conf.get("spark.tally.test.marker") == "overridden"
    # The defaults it was started with are still in force.
    assert built.conf.get("spark.sql.optimizer.windowGroupLimitThreshold") == "-1"
    assert (
        built.sparkContext.getConf().get("spark.serializer") == "org.apache.spark.serializer.KryoSerializer"
    )
