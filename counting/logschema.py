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
# The columns written with a Parquet dictionary: few distinct values in a file. The others (ids,
# addresses, times, offsets, watch times) hold nearly one value per row, so a dictionary overflows
# its page and the chunk falls back to plain mid-way; Spark's reader then expands the dictionary
# pages of such a column into every batch, and copies a string out of the dictionary on each read
# of a dictionary-encoded value. Written plain, on the 10M-event benchmark log: the Spark job
# 56.5 -> 54.2 s and 56.8 -> 53.3 s (alternating runs, new JVM each), DuckDB's query 17.5-17.9 s
# both ways, files 518 -> 453 MB.
DICTIONARY_COLUMNS: tuple[str, ...] = (
    "type",
    "video_id",
    "user_agent",
    "ja3",
    "video_duration_secs",
    "kafka_partition",
)
EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in LOG_COLUMNS[:12])
PARTITION_COLUMNS: tuple[str, ...] = ("ingest_date", "ingest_hour")
