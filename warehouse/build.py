"""`tally warehouse build`: the analysts' DuckDB file, one view or table per model, built aside and
switched in with one rename so that nobody ever opens a half-built file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from counting import batchpaths
from counting.counts import COUNT_FIELDS
from counting.logschema import LOG_COLUMNS, PARTITION_COLUMNS
from counting.settings import Settings
from counting.signals import REASONS
from warehouse.baseline import baseline_schema, read_pointer, rejected_column
from warehouse.errors import WarehouseBuildError
from warehouse.explanations import EXPLAINED_SCHEMA, explained_path
from warehouse.models import MODELS_DIR, Model, literal, load_models, render

# Written in a storage format that DuckDB 1.x command lines read too (a 2.0 file needs a 2.0 CLI).
STORAGE_COMPATIBILITY = "v1.0.0"

# SQL types by the log schema's kinds, which are also Arrow's names of those types.
_SQL_TYPES = {"string": "varchar", "int64": "bigint", "double": "double", "list<item: string>": "varchar[]"}

# The relational store's tables the builder copies in (DuckDB cannot load its sqlite extension
# offline), with the DuckDB types the staging models read.
_SOURCES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "raw_videos": (
        "videos",
        (
            ("video_id", "varchar"),
            ("creator_id", "varchar"),
            ("duration_secs", "double"),
            ("monetized", "boolean"),
        ),
    ),
    "raw_payout_ledger": (
        "payout_ledger",
        (
            ("creator_id", "varchar"),
            ("day", "date"),
            ("run_id", "varchar"),
            ("rules_version", "varchar"),
            ("monetizable_views", "bigint"),
            ("rate_per_1000", "decimal(20, 6)"),
            ("currency", "varchar"),
            ("amount", "decimal(20, 6)"),
            ("input_files", "varchar"),
            ("input_files_count", "integer"),
            ("input_files_digest", "varchar"),
            ("counted_ids_digest", "varchar"),
            ("created_at", "timestamp"),
        ),
    ),
    "raw_batch_runs": (
        "batch_runs",
        (
            ("run_id", "varchar"),
            ("cutoff", "bigint"),
            ("rules_version", "varchar"),
            ("started_at", "timestamp"),
            ("finished_at", "timestamp"),
            ("status", "varchar"),
            ("events_read", "bigint"),
            ("published_at", "timestamp"),
            ("allow_decrease_reason", "varchar"),
            ("skip_validation", "boolean"),
            ("forced", "boolean"),
        ),
    ),
}


@dataclass(frozen=True)
class ModelReport:
    """One built model: its name, whether it is a view or a table, and its rows at build time."""

    name: str
    materialized: str
    rows: int


@dataclass(frozen=True)
class BuildReport:
    """What a build wrote: the file, the batch run its batch models read, sources and models."""

    path: Path
    run_id: str | None
    sources: dict[str, int]
    models: list[ModelReport]
    seconds: float


def _empty_relation(columns: list[tuple[str, str]]) -> str:
    """A typed relation with no rows, for an input that does not exist yet."""
    select = ", ".join(f"cast(null as {kind}) as {name}" for name, kind in columns)
    return f"(select {select} where false)"


def _parquet(glob: str, hive: bool = False) -> str:
    options = ", hive_partitioning = true, union_by_name = true" if hive else ""
    return f"read_parquet({literal(glob)}{options})"


def _has_files(folder: Path, pattern: str) -> bool:
    return folder.is_dir() and any(folder.glob(pattern))


def _with_columns(folder: Path, columns: list[tuple[str, str]]) -> str:
    """The Parquet files of `folder`, with each of `columns` they lack (files of a run made before
    the column was added) as zeros."""
    present = set(pq.read_schema(next(folder.glob("*.parquet"))).names)
    missing = ", ".join(f"cast(0 as {kind}) as {name}" for name, kind in columns if name not in present)
    relation = _parquet(str(folder / "*.parquet"))
    return f"(select *, {missing} from {relation})" if missing else relation


def _baseline_columns() -> list[tuple[str, str]]:
    return [(f.name, "varchar" if pa.types.is_string(f.type) else "bigint") for f in baseline_schema()]


def model_variables(settings: Settings) -> tuple[dict[str, str], str | None]:
    """The SQL the model variables stand for, from the settings' log and the current batch run
    (empty typed relations where there is no data yet), and that run's id."""
    raw_pattern = "ingest_date=*/ingest_hour=*/*.parquet"
    log_columns = [(name, _SQL_TYPES[kind]) for name, kind in LOG_COLUMNS]
    log_columns += [(name, "varchar") for name in PARTITION_COLUMNS]
    raw_dir = settings.raw_dir.resolve()
    variables = {
        "raw_log": _parquet(str(raw_dir / raw_pattern), hive=True)
        if _has_files(raw_dir, raw_pattern)
        else _empty_relation(log_columns),
    }
    pointer = read_pointer(settings.baselines_dir)
    run_id = None if pointer is None else str(pointer["run_id"])
    daily_columns = [
        ("date", "date"),
        *_baseline_columns(),
        ("run_id", "varchar"),
        ("rules_version", "varchar"),
    ]
    daily_dir = settings.batch_dir.resolve() / str(run_id) / batchpaths.DAILY_DIR
    if run_id is not None and _has_files(daily_dir, "*.parquet"):
        variables["daily_video"] = _with_columns(daily_dir, daily_columns)
    else:
        variables["daily_video"] = _empty_relation(daily_columns)
    explained_columns = [(f.name, _SQL_TYPES[str(f.type)]) for f in EXPLAINED_SCHEMA]
    explained_dir = explained_path(settings.batch_dir.resolve(), str(run_id))
    if run_id is not None and _has_files(explained_dir, "*.parquet"):
        variables["explained_views"] = _parquet(str(explained_dir / "*.parquet"))
    else:
        variables["explained_views"] = _empty_relation(explained_columns)
    if pointer is not None:
        variables["baseline"] = _parquet(str(settings.baselines_dir.resolve() / str(pointer["path"])))
    else:
        variables["baseline"] = _empty_relation(_baseline_columns())
    variables["baseline_run_id"] = literal(run_id)
    variables["baseline_cutoff"] = literal(None if pointer is None else int(str(pointer["cutoff"])))
    variables["baseline_rules_version"] = literal(None if pointer is None else str(pointer["rules_version"]))
    variables.update(reason_variables())
    return variables, run_id


def reason_variables(reasons: Sequence[str] = REASONS) -> dict[str, str]:
    """The count columns the models type alike (`count_columns`, from `counting.counts`), and the
    rejection reasons' columns, from `counting.signals.REASONS` (a new signal adds its column to
    every model): typed (`rejected_columns`), summed per day
    (`rejected_views_sum`), named by reason for an unpivot (`rejected_by_reason`, `reasons`)."""
    columns = [rejected_column(r) for r in reasons]
    return {
        # The counts every model types alike (`flagged`, of the daily rows only, is typed there).
        "count_columns": ",\n        ".join(f"{c}::bigint as {c}" for c in COUNT_FIELDS if c != "flagged"),
        "rejected_columns": ",\n        ".join(f"{c}::bigint as {c}" for c in columns),
        "rejected_views_sum": "\n        + ".join(f"daily.{c}" for c in columns),
        "rejected_by_reason": ",\n            ".join(f"{rejected_column(r)} as {r}" for r in reasons),
        "reasons": ", ".join(reasons),
    }


def _store_rows(settings: Settings, table: str, columns: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """The rows of a store table (only the given columns; null for a column an older schema lacks),
    or none when the store or the table does not exist yet. A SQLite store that has no file yet is
    not created."""
    url = sa.engine.make_url(settings.store_url)
    if url.get_backend_name() == "sqlite" and (not url.database or not Path(url.database).exists()):
        return []
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        if not inspector.has_table(table):
            return []
        present = {column["name"] for column in inspector.get_columns(table)}
        from warehouse import tables  # the store's column types (exact decimals, UTC times)

        source = tables.metadata.tables[table]
        query = sa.select(*(source.c[name] for name, _ in columns if name in present))
        with engine.connect() as connection:
            return [
                {name: row._mapping.get(name) for name, _ in columns} for row in connection.execute(query)
            ]
    except sa.exc.SQLAlchemyError as exc:
        raise WarehouseBuildError(f"cannot read {table!r} from the store at {url!r}: {exc}") from exc
    finally:
        engine.dispose()


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _load_sources(con: duckdb.DuckDBPyConnection, settings: Settings) -> dict[str, int]:
    counts = {}
    for name, (table, columns) in _SOURCES.items():
        con.execute(f"create table {name} ({', '.join(f'{c} {kind}' for c, kind in columns)})")
        rows = _store_rows(settings, table, columns)
        if rows:
            marks = ", ".join("?" for _ in columns)
            con.executemany(
                f"insert into {name} values ({marks})",
                [[_plain(row[c]) for c, _ in columns] for row in rows],
            )
        counts[name] = len(rows)
    return counts


def _create(con: duckdb.DuckDBPyConnection, model: Model, variables: dict[str, str]) -> ModelReport:
    sql = render(model.sql, variables)
    try:
        con.execute(f"create {model.materialized} {model.name} as\n{sql}")
        rows = con.execute(f"select count(*) from {model.name}").fetchall()[0][0]
    except duckdb.Error as exc:
        raise WarehouseBuildError(f"model {model.name!r} failed: {exc}") from exc
    return ModelReport(model.name, model.materialized, int(rows))


@contextmanager
def _aside(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` that replaces it on success and is removed on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)


def build_warehouse(
    settings: Settings, path: Path | None = None, models_dir: Path = MODELS_DIR
) -> BuildReport:
    """Build the warehouse file (default `settings.warehouse_path`) from the log, the current batch
    run and the relational store, and switch it in atomically; the old file stays on failure."""
    started = time.monotonic()
    target = (path or settings.warehouse_path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    models = load_models(models_dir)
    variables, run_id = model_variables(settings)
    with _aside(target) as tmp:
        con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_COMPATIBILITY})
        try:
            sources = _load_sources(con, settings)
            reports = [_create(con, model, variables) for model in models]
            con.execute("checkpoint")
        finally:
            con.close()
    return BuildReport(
        path=target,
        run_id=run_id,
        sources=sources,
        models=reports,
        seconds=round(time.monotonic() - started, 3),
    )
