"""Creator payouts: per creator and UTC day of event time, the counted views of monetized videos
times the rate, with the run, rules version, input files and a digest of the counted ids.

"Day" is the UTC day of a view's event time `ts`, as in the batch layer's daily output. The amount
is `views * rate_per_1000 / 1000` rounded to 6 decimal places half-to-even (exact whenever the rate
has at most 3 decimal places).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path
from urllib.parse import unquote, urlparse

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from batch_layer.columns import COUNTED, floor_div, is_view
from batch_layer.errors import BatchError, PayoutsUnavailable
from batch_layer.extract import read_log
from batch_layer.rules_used import save_run_rules
from batch_layer.session import session_for, stop_session
from batch_layer.transform import classify
from counting import rules
from counting.batchpaths import computed_payouts_path, payout_events_path
from counting.bots import filter_of
from counting.catalog import CatalogRow
from counting.settings import Settings
from warehouse.store import (
    MONEY_PLACE,
    SUCCEEDED,
    PayoutRow,
    RunRecord,
    catalog,
    get_run,
    open_store,
    write_ledger,
)
from warehouse.tables import file_digest

_FILE = "_input_file"
_EPOCH = date(1970, 1, 1)


def payout_amount(views: int, rate_per_1000: Decimal) -> Decimal:
    """`views * rate / 1000`, rounded half-to-even to 6 decimal places (the ledger's precision)."""
    with localcontext() as context:
        context.prec = 60
        return (Decimal(views) * rate_per_1000 / 1000).quantize(MONEY_PLACE, rounding=ROUND_HALF_EVEN)


def day_of_date(day: date) -> int:
    return (day - _EPOCH).days


def date_of_day(day: int) -> date:
    return _EPOCH + timedelta(days=day)


def relative_file(uri: str, raw_dir: Path) -> str:
    """A Spark input file URI as a path relative to the raw directory (posix separators)."""
    path = Path(unquote(urlparse(uri).path))
    return path.resolve().relative_to(raw_dir.resolve()).as_posix()


def _monetized_frame(spark: SparkSession, videos: Iterable[CatalogRow]) -> DataFrame:
    schema = StructType(
        [StructField("video_id", StringType(), False), StructField("creator_id", StringType(), False)]
    )
    rows = [(v.video_id, v.creator_id) for v in videos if v.monetized]
    return spark.createDataFrame(rows, schema)


def _digest_column(ids: str) -> F.Column:
    """`warehouse.tables.ids_digest` in Spark: sha256 over each sorted id's sha256 hex."""
    hashed = F.transform(F.array_sort(F.collect_list(ids)), lambda x: F.sha2(x, 256))
    return F.sha2(F.array_join(hashed, ""), 256)


def _day_files(events: DataFrame, raw_dir: Path) -> dict[int, set[str]]:
    """Per event-time day, the files holding a view of that day (the views that decide that day's
    counted views: bot windows and view windows never cross a UTC day)."""
    pairs = (
        events.where(is_view())
        .select(floor_div("ts", rules.DAY_MS).alias("day"), F.col(_FILE))
        .distinct()
        .collect()
    )
    files: dict[int, set[str]] = defaultdict(set)
    for pair in pairs:
        files[int(pair["day"])].add(relative_file(pair[_FILE], raw_dir))
    return files


def payouts_of_classified(
    spark: SparkSession,
    settings: Settings,
    run_id: str,
    cutoff: int,
    classified: DataFrame,
    videos: Iterable[CatalogRow] | Mapping[str, CatalogRow],
    rules_version: str,
) -> list[PayoutRow]:
    """The payout rows of every (creator, day) with monetizable views, by day then creator, from a
    run's classified log (`transform.classify` of the log ingested before `cutoff`, e.g. the one
    the run's other outputs came from, in the same session). Also (over)writes the run's counted
    ids at `payout_events_path`. The input files come from one more scan of the log's view times."""
    listed = list(videos.values()) if isinstance(videos, Mapping) else list(videos)
    counted = (
        classified.where(F.col("outcome") == COUNTED)
        .join(F.broadcast(_monetized_frame(spark, listed)), "video_id")
        .select("creator_id", "day", "video_id", "event_id")
        .cache()
    )
    try:
        detail = counted.withColumn("date", F.date_from_unix_date(F.col("day").cast("int"))).drop("day")
        detail.write.mode("overwrite").partitionBy("date").parquet(str(payout_events_path(settings, run_id)))
        figures = (
            counted.groupBy("creator_id", "day")
            .agg(F.count(F.lit(1)).alias("views"), _digest_column("event_id").alias("digest"))
            .collect()
        )
    finally:
        counted.unpersist()
    files_of_views = read_log(spark, settings.raw_dir, cutoff).withColumn(_FILE, F.input_file_name())
    day_files = _day_files(files_of_views, settings.raw_dir)
    digests = {path: file_digest(settings.raw_dir / path) for files in day_files.values() for path in files}
    rate = settings.payout_rate_per_1000_views
    rows = [
        PayoutRow(
            creator_id=figure["creator_id"],
            day=date_of_day(int(figure["day"])),
            run_id=run_id,
            rules_version=rules_version,
            monetizable_views=int(figure["views"]),
            rate_per_1000=rate,
            currency=settings.payout_currency,
            amount=payout_amount(int(figure["views"]), rate),
            input_files={path: digests[path] for path in sorted(day_files[int(figure["day"])])},
            counted_ids_digest=figure["digest"],
        )
        for figure in figures
    ]
    return sorted(rows, key=lambda r: (r.day, r.creator_id))


def compute_payouts(
    spark: SparkSession,
    settings: Settings,
    run_id: str,
    cutoff: int,
    videos: Iterable[CatalogRow] | Mapping[str, CatalogRow],
) -> list[PayoutRow]:
    """The payout rows of every (creator, day) with monetizable views in the log ingested before
    `cutoff`, by day then creator. Also (over)writes the run's counted ids at `payout_events_path`."""
    bot_filter = filter_of(settings.bot_rules_file)
    save_run_rules(settings, run_id, bot_filter)
    classified = classify(read_log(spark, settings.raw_dir, cutoff), bot_filter)
    return payouts_of_classified(spark, settings, run_id, cutoff, classified, videos, bot_filter.version)


def save_computed_payouts(settings: Settings, run_id: str, rows: Sequence[PayoutRow]) -> Path:
    """Keep a run's computed payout rows aside (JSON, money as decimal text), replacing any."""
    path = computed_payouts_path(settings, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = [
        {
            **asdict(row),
            "day": row.day.isoformat(),
            "rate_per_1000": str(row.rate_per_1000),
            "amount": str(row.amount),
        }
        for row in rows
    ]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"run_id": run_id, "rows": items}, sort_keys=True))
    os.replace(tmp, path)
    return path


def load_computed_payouts(settings: Settings, run_id: str) -> list[PayoutRow]:
    """The payout rows a run computed and kept aside; raise `PayoutsUnavailable` if there are none."""
    path = computed_payouts_path(settings, run_id)
    if not path.is_file():
        raise PayoutsUnavailable(
            f"run {run_id!r} has no computed payouts at {path}: it was computed without them; load the "
            "catalog ('tally catalog load') and run 'tally batch run' (or the Airflow DAG) to compute, "
            "publish and pay a run"
        )
    kept = json.loads(path.read_text())
    return [
        PayoutRow(
            **{
                **item,
                "day": date.fromisoformat(item["day"]),
                "rate_per_1000": Decimal(item["rate_per_1000"]),
                "amount": Decimal(item["amount"]),
            }
        )
        for item in kept["rows"]
    ]


def write_payouts(
    settings: Settings,
    run_id: str,
    cutoff: int,
    rows: list[PayoutRow],
    started_at: datetime | None = None,
    events_read: int | None = None,
) -> RunRecord:
    """Record the run (succeeded) and replace its ledger rows by `rows`, in one transaction. A run
    already recorded (by publishing) keeps its publication fields.

        Idempotent: writing the same run again leaves one row per (creator, day). The store must be
        migrated (`warehouse.migrate.migrate`) beforehand.
    """
    inputs = {path: sha for row in rows for path, sha in row.input_files.items()}
    with open_store(settings.store_url) as store:
        recorded = get_run(store, run_id)
        if recorded is not None and recorded.cutoff == cutoff:
            # Keep what publishing recorded (when, and the operator's reason or flags).
            run = replace(
                recorded,
                status=SUCCEEDED,
                finished_at=datetime.now(UTC),
                events_read=events_read if events_read is not None else recorded.events_read,
                input_files=inputs,
            )
        else:
            run = RunRecord(
                run_id=run_id,
                cutoff=cutoff,
                rules_version=rows[0].rules_version if rows else filter_of(settings.bot_rules_file).version,
                started_at=started_at or datetime.now(UTC),
                finished_at=datetime.now(UTC),
                status=SUCCEEDED,
                events_read=events_read,
                input_files=inputs,
            )
        write_ledger(store, run, rows)
    return run


def run_payouts(
    settings: Settings, run_id: str, cutoff: int, spark: SparkSession | None = None
) -> list[PayoutRow]:
    """Compute the payouts of a run from the log and the store's catalog, and write them.

    The cutoff is the batch run's (already checked closed). Uses `spark` if given, else builds one.
    """
    started_at = datetime.now(UTC)
    with open_store(settings.store_url) as store:
        videos = catalog(store)
    session, own_session = session_for(settings, spark)
    try:
        rows = compute_payouts(session, settings, run_id, cutoff, videos)
    except (PySparkException, Py4JError, OSError) as exc:
        raise BatchError(
            f"payouts of run {run_id!r} at cutoff {cutoff} failed, the ledger is unchanged: {exc}"
        ) from exc
    finally:
        if own_session:
            stop_session(session)
    write_payouts(settings, run_id, cutoff, rows, started_at=started_at)
    return rows
