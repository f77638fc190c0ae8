"""Batch-layer fixtures: one SparkSession for the session, log frames and hive-layout log files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from batch_layer.extract import log_schema
from batch_layer.session import build_session
from counting.event import Event
from counting.logschema import LOG_COLUMNS
from counting.settings import Settings

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_ARROW_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in LOG_COLUMNS])


def log_rows(events: Sequence[Event]) -> list[dict[str, object]]:
    """Events as log rows: every log column, the Kafka position made up from the list order."""
    rows = []
    for offset, event in enumerate(events):
        row: dict[str, object] = {name: None for name, _ in LOG_COLUMNS}
        row.update(msgspec.structs.asdict(event))
        row.update(kafka_partition=0, kafka_offset=offset)
        rows.append(row)
    return rows


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


def _write_log(raw_dir: Path, events: Sequence[Event], files_per_hour: int = 2) -> None:
    """Write events as the archiver does: `ingest_date=YYYY-MM-DD/ingest_hour=HH/*.parquet` (UTC)."""
    by_hour: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
    for row in log_rows(events):
        moment = datetime.fromtimestamp(int(str(row["ingest_ts"])) / 1000, tz=UTC)
        by_hour[(moment.strftime("%Y-%m-%d"), moment.strftime("%H"))].append(row)
    for (day, hour), rows in by_hour.items():
        folder = raw_dir / f"ingest_date={day}" / f"ingest_hour={hour}"
        folder.mkdir(parents=True, exist_ok=True)
        for part in range(files_per_hour):
            chunk = rows[part::files_per_hour]
            if chunk:
                table = pa.Table.from_pylist(chunk, schema=LOG_ARROW_SCHEMA)
                pq.write_table(table, folder / f"events-0-{part:05d}.parquet")


@pytest.fixture
def write_log() -> Callable[[Path, Sequence[Event]], None]:
    """Write events under a raw directory in the archiver's hive layout."""
    return _write_log
