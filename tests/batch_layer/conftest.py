"""Batch-layer fixtures: one SparkSession for the session, log frames and hive-layout log files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from batch_layer.extract import log_schema
from batch_layer.session import build_session
from counting.event import Event
from counting.settings import Settings
from tests.logfiles import log_rows
from tests.logfiles import write_log as write_log_files


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local[2] SparkSession for every batch-layer test (4 shuffle partitions, UTC)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("spark"), spark_master="local[2]")
    session = build_session(settings, app_name="tally-batch-tests")
    yield session
    session.stop()


@pytest.fixture
def log_frame(spark: SparkSession) -> Callable[[Sequence[Event]], DataFrame]:
    """Build a tiny DataFrame of log rows (the log's schema) from events."""

    def build(events: Sequence[Event]) -> DataFrame:
        return spark.createDataFrame(log_rows(events), log_schema())

    return build


@pytest.fixture
def write_log() -> Callable[[Path, Sequence[Event]], None]:
    """Write events under a raw directory in the archiver's hive layout."""
    return write_log_files
