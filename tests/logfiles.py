"""Test helpers shared by the layers' tests: events written as the archiver's Parquet log, and the
oracle's counts as baseline rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pyarrow as pa

from counting import oracle
from counting.bots import SHIPPED, BotFilter
from counting.event import Event
from counting.logschema import LOG_COLUMNS
from speed_layer.archiver.archiver import file_name, write_log_file
from warehouse.baseline import BaselineRow

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_ARROW_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in LOG_COLUMNS])
WriteLog = Callable[[Path, Sequence[Event]], None]


def log_rows(events: Sequence[Event], first_offset: int = 0) -> list[dict[str, object]]:
    """Events as log rows: every log column, the Kafka position made up from the list order."""
    rows = []
    for offset, event in enumerate(events, start=first_offset):
        row: dict[str, object] = {name: None for name, _ in LOG_COLUMNS}
        row.update(msgspec.structs.asdict(event))
        row.update(kafka_partition=0, kafka_offset=offset)
        rows.append(row)
    return rows


def hour_folder(raw_dir: Path, ingest_ts: int) -> Path:
    moment = datetime.fromtimestamp(ingest_ts / 1000, tz=UTC)
    return raw_dir / f"ingest_date={moment:%Y-%m-%d}" / f"ingest_hour={moment:%H}"


def write_rows(folder: Path, name: str, rows: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    write_log_file(pa.Table.from_pylist(rows, schema=LOG_ARROW_SCHEMA), path)
    return path


def write_log(raw_dir: Path, events: Sequence[Event], files_per_hour: int = 2) -> None:
    """Write events as the archiver does: `ingest_date=YYYY-MM-DD/ingest_hour=HH/` (UTC), files named
    by the offsets they hold (`events-p0-FIRST-LAST.parquet`), each an offset range of the hour."""
    by_hour: dict[Path, list[dict[str, object]]] = defaultdict(list)
    for row in log_rows(events):
        by_hour[hour_folder(raw_dir, int(str(row["ingest_ts"])))].append(row)
    for folder, rows in by_hour.items():
        size = -(-len(rows) // files_per_hour)
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            first, last = int(str(chunk[0]["kafka_offset"])), int(str(chunk[-1]["kafka_offset"]))
            write_rows(folder, file_name("events", 0, first, last), chunk)


def oracle_rows(
    events: Sequence[Event], cutoff: int | None, bot_filter: BotFilter = SHIPPED
) -> dict[str, BaselineRow]:
    """The oracle's counts as of the cutoff (with the bot rules of `bot_filter`), as the baseline
    rows a batch must publish."""
    return {
        video: BaselineRow(
            video_id=video,
            views=c.views,
            likes=c.likes,
            dislikes=c.dislikes,
            unique_viewers=c.unique_viewers,
            short_views=c.short_views,
            repeat_views=c.repeat_views,
            flagged=c.flagged,
            rejected=c.rejected,
        )
        for video, c in oracle.count(events, cutoff, bot_filter).items()
    }
