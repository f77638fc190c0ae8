"""The columns of the raw Parquet log, as plain data (the archiver and the batch build their
schemas from it)."""

from __future__ import annotations

# (column, logical type): string, int64 or double. Order is the file's column order.
LOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"),
    ("type", "string"),
    ("video_id", "string"),
    ("user_id", "string"),
    ("session_id", "string"),
    ("ts", "int64"),
    ("ip", "string"),
    ("user_agent", "string"),
    ("watch_secs", "double"),
    ("video_duration_secs", "double"),
    ("ja3", "string"),
    ("ingest_ts", "int64"),
    ("kafka_partition", "int64"),
    ("kafka_offset", "int64"),
)
EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in LOG_COLUMNS[:12])
PARTITION_COLUMNS: tuple[str, ...] = ("ingest_date", "ingest_hour")
