"""The frames the suites check: the raw files of an interval and a run's outputs, as pandas frames
with the derived columns that cross-row rules need (GX checks one row, or one pair of columns)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from counting import rules
from counting.logschema import LOG_COLUMNS
from quality import suites
from warehouse.baseline import COUNT_COLUMNS, REJECTED_COLUMNS, baseline_schema

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in LOG_COLUMNS])
_HOUR_DIR = re.compile(r"ingest_date=(\d{4}-\d{2}-\d{2})/ingest_hour=(\d{2})$")


def _visible(path: Path, root: Path) -> bool:
    # Readers skip names starting with "." or "_" (a writer's temporary files), as Spark does.
    return not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def hour_start_ms(folder: Path) -> int | None:
    """The start (ms) of the UTC hour a `ingest_date=…/ingest_hour=…` folder holds, else None."""
    match = _HOUR_DIR.search(folder.as_posix())
    if match is None:
        return None
    moment = datetime.strptime(f"{match.group(1)} {match.group(2)}", "%Y-%m-%d %H").replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def raw_files(raw_dir: Path, since_ms: int, cutoff_ms: int) -> list[Path]:
    """The log files in the hour partitions that overlap the ingestion interval [since, cutoff)."""
    if not raw_dir.is_dir():
        return []
    found = []
    for path in sorted(raw_dir.glob("ingest_date=*/ingest_hour=*/*.parquet")):
        start = hour_start_ms(path.parent)
        if (
            start is not None
            and _visible(path, raw_dir)
            and start < cutoff_ms
            and start + rules.HOUR_MS > since_ms
        ):
            found.append(path)
    return found


def _conform(table: pa.Table) -> tuple[pa.Table, str | None]:
    """The table in the log's schema, and what differed (a missing or mistyped column is nulled)."""
    problems: list[str] = []
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in LOG_SCHEMA:
        if field.name not in table.column_names:
            problems.append(f"{field.name} is missing")
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if column.type != field.type:
            problems.append(f"{field.name} is {column.type}, expected {field.type}")
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                column = pa.nulls(table.num_rows, field.type)
        columns.append(column)
    extra = sorted(set(table.column_names) - set(LOG_SCHEMA.names))
    if extra:
        problems.append(f"unknown columns {', '.join(extra)}")
    return pa.Table.from_arrays(columns, schema=LOG_SCHEMA), "; ".join(problems) or None


def unreadable(paths: Iterable[Path]) -> dict[Path, str]:
    """The files among `paths` that are no Parquet file (truncated, garbled), with the reader's
    words: no row of theirs can be checked, so they are reported once each, apart from the rows."""
    found: dict[Path, str] = {}
    for path in paths:
        try:
            pq.ParquetFile(path).metadata  # noqa: B018  (reads the footer: a truncated file has none)
        except (OSError, pa.ArrowInvalid) as exc:
            found[path] = str(exc)
    return found


def _read_file(path: Path, raw_dir: Path) -> pd.DataFrame:
    try:
        table, problem = _conform(pq.read_table(path))
    except (OSError, pa.ArrowInvalid) as exc:
        table, problem = LOG_SCHEMA.empty_table(), f"not a readable Parquet file ({exc})"
    frame = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    if problem is not None and frame.empty:
        # An unreadable or empty-but-wrong file still gets a row, so its problem is reported.
        frame = pd.DataFrame({name: pd.Series([None], dtype=object) for name in LOG_SCHEMA.names})
    frame[suites.FILE] = path.relative_to(raw_dir).as_posix()
    frame[suites.SCHEMA_PROBLEM] = problem
    start = hour_start_ms(path.parent)
    frame[suites.INGEST_LAG_MS] = pd.array(frame["ingest_ts"], dtype="Int64") - start
    frame[suites.TS_LEAD_MS] = pd.array(frame["ts"], dtype="Int64") - pd.array(
        frame["ingest_ts"], dtype="Int64"
    )
    return frame


def raw_frame(raw_dir: Path, files: Iterable[Path]) -> pd.DataFrame:
    """The rows of `files` in the log's columns, plus: the file (relative to `raw_dir`), what is
    wrong with the file's schema, `ts - ingest_ts`, and `ingest_ts` minus its partition hour's start."""
    frames = [_read_file(path, raw_dir) for path in files]
    if not frames:
        return _empty_raw_frame()
    return pd.concat(frames, ignore_index=True)


def _empty_raw_frame() -> pd.DataFrame:
    frame = LOG_SCHEMA.empty_table().to_pandas()
    for column in (suites.FILE, suites.SCHEMA_PROBLEM, suites.INGEST_LAG_MS, suites.TS_LEAD_MS):
        frame[column] = pd.Series(dtype=object)
    return frame


def qualified_views(raw_dir: Path, cutoff_ms: int) -> dict[str, int]:
    """Per video, the distinct view ids ingested before the cutoff that watched long enough: what
    the batch must have judged (counted, repeat or rejected). Computed apart from Spark, in DuckDB,
    keeping each event's first copy as `counting.rules.first_copy_order` does."""
    files = (
        [p for p in sorted(raw_dir.rglob("*.parquet")) if _visible(p, raw_dir)] if raw_dir.is_dir() else []
    )
    if not files:
        return {}
    query = """
        with copies as (
            select event_id, type, video_id, watch_secs, ingest_ts, kafka_partition, kafka_offset
            from read_parquet($files, union_by_name = true)
            where ingest_ts < $cutoff
        ),
        first_copies as (
            select *
            from copies
            qualify row_number() over (
                partition by event_id order by ingest_ts nulls first, kafka_partition, kafka_offset
            ) = 1
        )
        select video_id, count(*) as qualified
        from first_copies
        where type = 'view' and watch_secs >= $min_watch and not isnan(watch_secs)
        group by video_id
    """
    with duckdb.connect() as con:
        rows = con.execute(
            query,
            {"files": [str(p) for p in files], "cutoff": cutoff_ms, "min_watch": rules.MIN_WATCH_SECS},
        ).fetchall()
    return {str(video): int(count) for video, count in rows}


def _views_by_video(folder: Path) -> dict[str, int]:
    """Sum of `views` per video over a Parquet folder written by Spark (empty if absent)."""
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return {}
    table = pq.read_table(folder, columns=["video_id", "views"])
    summed = table.group_by("video_id").aggregate([("views", "sum")])
    return dict(zip(summed["video_id"].to_pylist(), summed["views_sum"].to_pylist(), strict=True))


def baseline_frame(
    baseline: Path,
    daily: Path,
    series: Path,
    qualified: Mapping[str, int],
    previous_views: Mapping[str, int],
) -> pd.DataFrame:
    """A run's baseline rows joined, per video, with: rejected + counted + repeat views, the
    qualified views of the log, the views of the daily and per-bucket outputs summed, and the
    served baseline's views. A video missing on one side counts zero there."""
    table = pq.read_table(baseline).cast(baseline_schema())
    frame = table.to_pandas().set_index("video_id")
    videos = sorted(set(frame.index) | set(qualified) | set(previous_views))
    frame = frame.reindex(videos).fillna(0).astype("int64")
    frame[suites.JUDGED_VIEWS] = (
        frame["views"] + frame["repeat_views"] + frame[list(REJECTED_COLUMNS)].sum(axis=1)
    )
    derived = {
        suites.QUALIFIED_VIEWS: qualified,
        suites.DAILY_VIEWS: _views_by_video(daily),
        suites.SERIES_VIEWS: _views_by_video(series),
        suites.PREVIOUS_VIEWS: previous_views,
    }
    for column, values in derived.items():
        frame[column] = pd.Series(values, dtype="int64").reindex(videos).fillna(0).astype("int64")
    return frame.rename_axis("video_id").reset_index()


def daily_frame(daily: Path) -> pd.DataFrame:
    """A run's per-day per-video counts (an empty frame of the right columns if there are none)."""
    if daily.is_dir() and any(daily.glob("*.parquet")):
        return pq.read_table(daily).to_pandas()
    columns = ["date", "video_id", *COUNT_COLUMNS, *REJECTED_COLUMNS, "run_id", "rules_version"]
    return pd.DataFrame({column: pd.Series(dtype=object) for column in columns})
