"""The batch job: check the cutoff, extract the log, transform it, write aside and publish."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from py4j.protocol import Py4JError
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from batch_layer import load
from batch_layer.cutoff import require_closed_cutoff
from batch_layer.errors import BatchError, CutoffBehindServed, InvalidRunId
from batch_layer.explain import write_explained
from batch_layer.extract import read_log
from batch_layer.payouts import payouts_of_classified, save_computed_payouts
from batch_layer.progress import Progress, log_progress, stage
from batch_layer.reach import creator_viewers, write_creator_viewers
from batch_layer.rules_used import save_run_rules
from batch_layer.series import bucket_totals, write_series, write_tiers
from batch_layer.session import session_for, stop_session
from batch_layer.totals import daily_totals, grain_counts, video_totals
from batch_layer.transform import classify
from counting.bots import filter_of
from counting.catalog import CatalogRow
from counting.errors import TallyError
from counting.settings import Settings
from warehouse.baseline import read_pointer

# A run id names directories: no separators, no leading dot.
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class BatchResult:
    """What a run did: its id, cutoff, rules version, rows read, videos and wall time, and how many
    payout rows it computed aside (None: payouts were not computed)."""

    run_id: str
    cutoff: int
    rules_version: str
    events_read: int
    videos: int
    seconds: float
    payouts: int | None = None


def new_run_id(cutoff_ms: int) -> str:
    """A fresh run id that sorts by time and names its cutoff: `<utc time>-c<cutoff>-<random>`."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-c{cutoff_ms}-{uuid.uuid4().hex[:6]}"


def compute_batch(
    settings: Settings,
    cutoff_ms: int,
    run_id: str | None = None,
    spark: SparkSession | None = None,
    videos: Mapping[str, CatalogRow] | None = None,
    progress: Progress = log_progress,
) -> BatchResult:
    """Recompute every count from the log ingested before `cutoff_ms` and write it aside, unpublished,
    with the explanations of the views it refused or flagged (`batch_layer.explain`). Its stages
    (spark session, read, classify, counts, outputs) are told to `progress` as they start and end.

    Refuses a cutoff off a bucket edge or above the archiver watermark. A given run id is rewritten
    in place by a rerun (idempotent); the default is a fresh one. Uses `spark` if given, else builds
    a session from the settings and stops it at the end. With the catalog's `videos`, the run's
    payouts are computed too, from the same classified log in the same session, and kept aside
    (`payouts.computed_payouts_path`) for the ledger once the run is validated and published.
    """
    started = time.monotonic()
    if run_id is not None and not _RUN_ID.fullmatch(run_id):
        raise InvalidRunId(f"run_id must match {_RUN_ID.pattern} (got {run_id!r})")
    require_closed_cutoff(settings, cutoff_ms)
    run_id = run_id or new_run_id(cutoff_ms)
    with stage(progress, "spark session"):
        session, own_session = session_for(settings, spark)
    try:
        bot_filter = filter_of(settings.bot_rules_file)
        save_run_rules(settings, run_id, bot_filter)
        with stage(progress, "read") as note:
            events = read_log(session, settings.raw_dir, cutoff_ms)
            events_read = events.count()
            note.detail = f"{events_read:,} events"
        # The classified log feeds the counts, the explanations and the payouts: kept, it is
        # classified once (here, so that the stage's time is the classification's).
        with stage(progress, "classify"):
            classified = classify(events, bot_filter).persist(StorageLevel.MEMORY_AND_DISK)
            classified.count()
        try:
            with stage(progress, "counts") as note:
                # Every count adds up from the counts per (video, day, bucket): kept, they are small.
                grain = grain_counts(classified, settings.bucket_ms).cache()
                try:
                    table = load.baseline_table(video_totals(grain))
                    load.write_daily(settings, run_id, bot_filter.version, daily_totals(grain))
                    write_series(settings, run_id, bucket_totals(grain))
                    write_tiers(settings, run_id, grain, classified)
                finally:
                    grain.unpersist()
                note.detail = f"{table.num_rows:,} videos"
            with stage(progress, "outputs") as note:
                write_explained(settings, run_id, classified, bot_filter)
                payouts = None
                if videos is not None:
                    reach = creator_viewers(session, classified, videos.values())
                    write_creator_viewers(settings, run_id, reach)
                    rows = payouts_of_classified(
                        session, settings, run_id, cutoff_ms, classified, videos, bot_filter.version
                    )
                    save_computed_payouts(settings, run_id, rows)
                    payouts = len(rows)
                load.write_baseline(settings, run_id, table)
                if payouts is not None:
                    note.detail = f"{payouts:,} payout rows computed"
        finally:
            classified.unpersist()
    except (PySparkException, Py4JError, OSError) as exc:
        raise BatchError(
            f"batch run {run_id!r} at cutoff {cutoff_ms} failed, the previous baseline stays published: {exc}"
        ) from exc
    finally:
        if own_session:
            stop_session(session)
    return BatchResult(
        run_id=run_id,
        cutoff=cutoff_ms,
        rules_version=bot_filter.version,
        events_read=events_read,
        videos=table.num_rows,
        seconds=round(time.monotonic() - started, 3),
        payouts=payouts,
    )


def publish_batch(settings: Settings, result: BatchResult) -> None:
    """The one switch: readers move to the run's baseline together with its cutoff."""
    load.publish(
        settings, result.run_id, result.cutoff, result.rules_version, published_at=int(time.time() * 1000)
    )


def require_not_behind_served(settings: Settings, cutoff_ms: int) -> None:
    """Raise `CutoffBehindServed` if a baseline of a later cutoff is served: publishing a run at
    `cutoff_ms` would move serving back (readers would count the speed buckets since then on an
    older baseline, and lose the corrections of the later run)."""
    served = read_pointer(settings.baselines_dir)
    if served is not None and int(str(served["cutoff"])) > cutoff_ms:
        raise CutoffBehindServed(
            f"cutoff {cutoff_ms} is older than the served baseline's {served['cutoff']} (run "
            f"{served['run_id']}): publishing it would move serving back; pick a cutoff >= "
            f"{served['cutoff']} (or 'auto'), or pass --force to publish it anyway"
        )


def run_batch(
    settings: Settings,
    cutoff_ms: int,
    run_id: str | None = None,
    spark: SparkSession | None = None,
    force: bool = False,
    videos: Mapping[str, CatalogRow] | None = None,
) -> BatchResult:
    """Recompute from the log ingested before `cutoff_ms`, write aside, then publish the baseline,
    unvalidated (the gated path is `tally batch run`, or the Airflow DAG); with the catalog's
    `videos`, also the payouts and the creators' reach (see `compute_batch`).

    A failure before the switch leaves the previous baseline published. A cutoff older than the
    served baseline's is refused unless `force`.
    """
    if not force:
        require_not_behind_served(settings, cutoff_ms)
    result = compute_batch(settings, cutoff_ms, run_id, spark, videos)
    publish_batch(settings, result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m batch_layer --cutoff <ms> [--run-id ID]`: run with the environment's settings."""
    parser = argparse.ArgumentParser(prog="python -m batch_layer", description=__doc__)
    parser.add_argument("--cutoff", type=int, required=True, help="cutoff in ms, on a bucket edge")
    parser.add_argument("--run-id", default=None, help="rerun (overwrite) this run id")
    args = parser.parse_args(argv)
    try:
        result = run_batch(Settings(), args.cutoff, run_id=args.run_id)
    except TallyError as exc:
        print(f"batch refused or failed: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result)))
    return 0
