"""Batch-layer fixtures: log frames and hive-layout log files (the session's SparkSession, `spark`,
is in tests/conftest.py, shared with the serving-layer tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from batch_layer.extract import log_schema
from counting.event import Event
from tests.logfiles import log_rows
from tests.logfiles import write_log as write_log_files


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
