"""The steps of a scheduled batch run as plain functions, one per Airflow task, each keyed by the
data interval so that a re-run of an interval replaces what it wrote.

wait for the cutoff → validate every raw file the run reads that is not yet validated → compute
(payouts too, kept aside) → validate the outputs → publish (and record the run) → write payouts →
compact the log's closed hours → build the warehouse → expire old speed buckets. `batch_run` is
the same path by hand (`tally batch run`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import redis

from batch_layer.cutoff import check_on_bucket_edge, log_watermark, require_closed_cutoff
from batch_layer.errors import BatchError, CutoffNotClosed, NothingRead, WatermarkUnavailable
from batch_layer.job import (
    BatchResult,
    compute_batch,
    new_run_id,
    publish_batch,
    require_not_behind_served,
)
from batch_layer.progress import Progress, log_progress, stage
from counting import keys, redisconn, rules
from counting.batchpaths import baseline_path
from counting.catalog import CatalogRow
from counting.settings import Settings
from tally.submit import compute_with_spark_submit
from warehouse.baseline import current_baseline, read_pointer

log = logging.getLogger(__name__)


def interval_cutoff(data_interval_end: datetime, settings: Settings) -> int:
    """The cutoff of a data interval: its end in ms, which must be a bucket edge."""
    cutoff = int(data_interval_end.timestamp() * 1000)
    check_on_bucket_edge(cutoff, settings.bucket_ms)
    return cutoff


def run_cutoff(settings: Settings, data_interval_end: datetime | None, run_after: datetime) -> int:
    """The cutoff of a run: its data interval's end, or, for a run triggered by hand without a
    logical date (Airflow gives it no interval), the last bucket edge before it was triggered."""
    if data_interval_end is not None:
        return interval_cutoff(data_interval_end, settings)
    moment = int(run_after.timestamp() * 1000)
    return rules.bucket_edge_at_or_before(moment, settings.bucket_ms)


def interval_run_id(cutoff: int) -> str:
    """The run id of a scheduled run: a re-run of the same interval rewrites the same outputs."""
    return f"interval-{cutoff}"


def recompute_run_id(cutoff: int) -> str:
    """The run id of a full recompute at a cutoff (kept apart from the scheduled run's outputs)."""
    return f"recompute-{cutoff}"


def wait_for_cutoff(settings: Settings, cutoff: int) -> bool:
    """One poke: True once the archiver watermark has closed the cutoff. Raises on a cutoff off a
    bucket edge (no waiting fixes it); a watermark not there yet, or Redis down, is a False."""
    try:
        require_closed_cutoff(settings, cutoff)
    except (CutoffNotClosed, WatermarkUnavailable) as exc:
        log.info("cutoff %s not closed yet: %s", cutoff, exc)
        return False
    return True


def latest_closed_cutoff(settings: Settings, before: int) -> int:
    """The latest bucket edge at or below both `before` and the archiver watermark."""
    client = redisconn.sync_client(settings, socket_connect_timeout=5.0)
    try:
        watermark = log_watermark(settings, client)
    finally:
        client.close()
    return rules.bucket_edge_at_or_before(min(before, watermark), settings.bucket_ms)


def recompute_bounds(settings: Settings, start: date, end: date | None) -> dict[str, Any]:
    """A full recompute of the days [start, end] (UTC; end: up to the archiver watermark): the
    raw partitions it validates from `since`, its cutoff (the end, capped by the watermark, on a
    bucket edge) and its run id."""
    since = int(datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp() * 1000)
    before = sys.maxsize
    if end is not None:
        after = end + timedelta(days=1)
        before = int(datetime(after.year, after.month, after.day, tzinfo=UTC).timestamp() * 1000)
    cutoff = latest_closed_cutoff(settings, before)
    if cutoff <= since:
        raise BatchError(
            f"nothing to recompute: the range starts at {start} but the latest closed cutoff is {cutoff} "
            "(check that the archiver runs, or pick an earlier start)"
        )
    return {"since": since, "cutoff": cutoff, "run_id": recompute_run_id(cutoff)}


def validate_raw(settings: Settings, since: int | None, cutoff: int, run_id: str = "the run") -> str:
    """Validate every raw file a run at `cutoff` reads that is not yet validated with its current
    checksum, whatever interval it belongs to (skipped intervals, backfills, files changed since);
    raise `ValidationFailed` if any rule breaks. `since` (the run's interval start; without it, the
    served baseline's cutoff) only words the report. Returns the summary (data docs paths included)."""
    from quality import require_valid
    from quality import validate_raw as check
    from warehouse.migrate import migrate

    if since is None:
        served = read_pointer(settings.baselines_dir)
        since = int(str(served["cutoff"])) if served is not None else None
    if since is not None and since >= cutoff:
        since = None
    migrate(settings.store_url)
    return require_valid(check(settings, cutoff, since, run_id)).summary()


def compute(
    settings: Settings, cutoff: int, run_id: str, progress: Progress = log_progress
) -> dict[str, Any]:
    """Compute the run's outputs aside, unpublished (local Spark, or spark-submit to the configured
    cluster), and its payouts from the store's catalog in the same session, kept aside for
    `write_payouts`. Returns the `BatchResult` as a plain dict (what an XCom carries). Its stages
    go to `progress` (on a cluster, one: the spark-submit)."""
    if settings.spark_master.startswith("local"):
        result = compute_batch(settings, cutoff, run_id=run_id, videos=_catalog(settings), progress=progress)
    else:
        with stage(progress, "compute (spark-submit)"):
            result = compute_with_spark_submit(settings, cutoff, run_id)
    return asdict(result)


def _catalog(settings: Settings) -> dict[str, CatalogRow]:
    """The store's video catalog (migrating the store first: a no-op when it is current)."""
    from warehouse.migrate import migrate
    from warehouse.store import catalog, open_store

    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        return catalog(store)


def validate_outputs(
    settings: Settings, run: Mapping[str, Any], allow_decrease_reason: str | None = None
) -> str:
    """Validate a computed run: every raw file it read is still validated with its current checksum,
    and its outputs hold against the log and the served baseline; raise a `QualityError` if not.
    `allow_decrease_reason` lets views fall below the served ones (after a data repair), noted in
    the report. Returns the summary."""
    from quality import require_valid, require_validated_inputs
    from quality import validate_outputs as check

    result = BatchResult(**run)
    require_validated_inputs(settings.raw_dir, settings.store_url, result.cutoff, result.run_id)
    previous = current_baseline(settings.baselines_dir)
    report = check(
        settings, result.run_id, result.cutoff, result.rules_version, previous, allow_decrease_reason
    )
    return require_valid(report).summary()


def publish(
    settings: Settings,
    run: Mapping[str, Any],
    allow_decrease_reason: str | None = None,
    skip_validation: bool = False,
    force: bool = False,
) -> bool:
    """Switch readers to the run's baseline unless a later cutoff is already served (a backfill of
    an old interval rewrites its outputs but never moves the served baseline back; `force` does),
    and record the run in the store's batch runs: when it was published, the operator's reason to
    let views fall, whether validation was skipped or the switch forced, the raw files in quarantine
    (left out of the log it read), the views it took back from the served baseline. True if
    switched."""
    from quality.corrections import run_corrections
    from warehouse.migrate import migrate
    from warehouse.store import SUCCEEDED, RunRecord, get_run, open_store, quarantined_files, record_run

    result = BatchResult(**run)
    served = current_baseline(settings.baselines_dir)
    behind = served is not None and served.cutoff > result.cutoff
    taken = run_corrections(
        settings.batch_dir,
        baseline_path(settings, result.run_id),
        result.run_id,
        result.cutoff,
        result.rules_version,
        served,
    )
    switched = False
    if behind and not force:
        assert served is not None
        log.warning(
            "kept baseline %s (cutoff %s): run %s has an earlier cutoff",
            served.run_id,
            served.cutoff,
            result.run_id,
        )
    else:
        publish_batch(settings, result)
        switched = True
    migrate(settings.store_url)
    now = datetime.now(UTC)
    with open_store(settings.store_url) as store:
        recorded = get_run(store, result.run_id)
        excluded = {path: q.reason for path, q in quarantined_files(store).items()}
        record_run(
            store,
            RunRecord(
                run_id=result.run_id,
                cutoff=result.cutoff,
                rules_version=result.rules_version,
                started_at=now - timedelta(seconds=result.seconds),
                status=SUCCEEDED,
                finished_at=now,
                events_read=result.events_read,
                input_files=recorded.input_files if recorded and recorded.cutoff == result.cutoff else {},
                published_at=now if switched else (recorded.published_at if recorded else None),
                allow_decrease_reason=(allow_decrease_reason or "").strip() or None,
                skip_validation=skip_validation,
                forced=force and (behind or result.events_read == 0),
                excluded_files=excluded or None,
                corrections=taken or None,
            ),
        )
    return switched


def write_payouts(settings: Settings, run: Mapping[str, Any]) -> int:
    """Write the payout rows the run computed (in `compute`, same Spark session) to the ledger,
    replacing the run's earlier rows; returns how many. Only for a run `publish` recorded (so
    validated): raise `PayoutsUnavailable` otherwise, or when the run computed no payouts."""
    result = BatchResult(**run)
    return write_run_payouts(settings, result.run_id)[1]


def write_run_payouts(settings: Settings, run_id: str | None = None) -> tuple[str, int]:
    """Write a recorded run's computed payouts to the ledger (default: the served baseline's run);
    returns the run id and the rows written."""
    from batch_layer.errors import PayoutsUnavailable
    from batch_layer.payouts import load_computed_payouts
    from batch_layer.payouts import write_payouts as write
    from warehouse.migrate import migrate
    from warehouse.store import get_run, open_store

    if run_id is None:
        served = read_pointer(settings.baselines_dir)
        if served is None:
            raise PayoutsUnavailable(
                "no baseline is published yet, so no run's payouts can be written: load the catalog "
                "('tally catalog load') and run 'tally batch run' first"
            )
        run_id = str(served["run_id"])
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        recorded = get_run(store, run_id)
    if recorded is None:
        raise PayoutsUnavailable(
            f"run {run_id!r} is not a recorded batch run (runs are recorded when they pass validation "
            "and publish): check the run id ('tally batch run' prints it), or run the batch first"
        )
    if recorded.skip_validation:
        log.warning("run %s was published WITHOUT validation: its payouts are written as asked", run_id)
    rows = load_computed_payouts(settings, run_id)
    write(settings, run_id, recorded.cutoff, rows, events_read=recorded.events_read)
    return run_id, len(rows)


@dataclass(frozen=True)
class ManualRun:
    """What `tally batch run` did: the run, whether its baseline was switched in, the validation
    summaries (None when skipped), the payout rows written (None: none written) and, when that
    is not the whole story, a line saying why and what to run next (`payouts_note`)."""

    result: BatchResult
    published: bool
    raw_validation: str | None
    output_validation: str | None
    payouts_written: int | None
    payouts_note: str | None = None
    compaction: dict[str, Any] | None = None


def batch_run(
    settings: Settings,
    cutoff: int,
    *,
    payouts: bool | None = None,
    skip_validation: bool = False,
    allow_decrease_reason: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] = log.warning,
    progress: Progress = log_progress,
) -> ManualRun:
    """A batch run by hand, through the same gates as the DAG: refuse a cutoff that would move
    serving back or read nothing (`force` publishes it anyway), validate the raw files it reads,
    compute (payouts in the same session), validate the outputs (views may fall only with
    `allow_decrease_reason`), publish and record the run, write the payouts: when the store's
    video catalog is loaded, unless `payouts` is False (True: even with an empty catalog).
    `skip_validation` leaves both gates out (recorded in the run). `warn` says what is unusual;
    `progress` hears each stage start and end (validate inputs, spark session, read, classify,
    counts, outputs, validate outputs, publish, payouts)."""
    from quality.inputs import run_inputs

    run_id = new_run_id(cutoff)
    require_closed_cutoff(settings, cutoff)
    served = read_pointer(settings.baselines_dir)
    if served is not None and int(str(served["cutoff"])) > cutoff:
        if not force:
            require_not_behind_served(settings, cutoff)
        warn(
            f"--force: publishing cutoff {cutoff}, OLDER than the served baseline's {served['cutoff']} "
            f"(run {served['run_id']}): serving moves back"
        )
    if not run_inputs(settings.raw_dir, cutoff):
        _nothing_read(cutoff, force, warn)
    _say_quarantined(settings, warn)
    catalog_loaded = bool(_catalog(settings))
    raw_summary = None
    if skip_validation:
        warn(f"--skip-validation: run {run_id} is published WITHOUT validating its inputs or outputs")
    else:
        with stage(progress, "validate inputs"):
            raw_summary = validate_raw(settings, None, cutoff, run_id)
    run = compute(settings, cutoff, run_id, progress)
    result = BatchResult(**run)
    if result.events_read == 0:
        _nothing_read(cutoff, force, warn)
    output_summary = None
    if not skip_validation:
        with stage(progress, "validate outputs"):
            output_summary = validate_outputs(settings, run, allow_decrease_reason)
    with stage(progress, "publish"):
        published = publish(settings, run, allow_decrease_reason, skip_validation, force)
    written = None
    if payouts or (payouts is None and catalog_loaded):
        with stage(progress, "payouts") as note:
            written = write_run_payouts(settings, result.run_id)[1]
            note.detail = f"{written:,} ledger rows"
    compaction = None
    if published:
        with stage(progress, "compact log") as note:
            compaction = compact_log(settings, cutoff)
            note.detail = f"{compaction['merged']:,} files into {compaction['written']:,}"
    return ManualRun(
        result,
        published,
        raw_summary,
        output_summary,
        written,
        _payouts_note(result, catalog_loaded, written),
        compaction,
    )


def _payouts_note(result: BatchResult, catalog_loaded: bool, written: int | None) -> str | None:
    """Why a run wrote no payouts and what to run next; None when it wrote them from a catalog."""
    if not catalog_loaded:
        return (
            f"no payouts: the video catalog is empty, so run {result.run_id} computed none; load it with "
            "'tally catalog load', then run 'tally batch run' again"
        )
    if written is None:
        return (
            f"payouts of run {result.run_id} computed, not written (--no-payouts): "
            f"'tally payouts write --run-id {result.run_id}' writes them to the ledger"
        )
    return None


def _say_quarantined(settings: Settings, warn: Callable[[str], None]) -> None:
    """Warn that the run leaves the files in quarantine out, naming them."""
    from quality.quarantine import in_quarantine

    held = in_quarantine(settings)
    if held:
        named = "; ".join(f"{path} ({q.rows} rows: {q.reason})" for path, q in held.items())
        warn(
            f"{len(held)} raw file(s) in quarantine are left out of this run (recorded with it): "
            f"{named}; 'tally batch release FILE --reason …' puts one back"
        )


def _nothing_read(cutoff: int, force: bool, warn: Callable[[str], None]) -> None:
    if not force:
        raise NothingRead(
            f"cutoff {cutoff} reads no event (no raw file holds a row ingested before it): publishing "
            "it would serve an empty baseline; pick a later cutoff (or 'auto'), or pass --force"
        )
    warn(f"--force: publishing cutoff {cutoff}, which reads NO event: an empty baseline is served")


def compact_log(settings: Settings, cutoff: int) -> dict[str, Any]:
    """Merge the validated files of each hour that ends at or before the run's (closed) cutoff, a
    file per partition (`quality.compaction`); returns what it did as a plain dict."""
    from quality.compaction import compact_log as compact
    from warehouse.migrate import migrate

    migrate(settings.store_url)
    report = compact(settings, cutoff)
    if report.left:
        log.warning(
            "log compaction left %d group(s) as they are: %s", len(report.left), "; ".join(report.left[:5])
        )
    return asdict(report)


def build_warehouse(settings: Settings) -> str:
    """Rebuild the analysts' DuckDB file from the published baseline, the log and the store."""
    from warehouse.build import build_warehouse as build

    return str(build(settings).path)


def expire_speed_buckets(settings: Settings, now_ms: int) -> int:
    """Delete the speed layer's per-bucket keys older than the retention: each video's bucket
    counts, parts and viewer sketches (and their entries in its bucket index), and the trending sets.
    Returns how many keys were deleted. Idempotent; the counter's own key expiry does most of it."""
    oldest_kept = rules.bucket_of(now_ms - settings.retention_ms, settings.bucket_ms)
    client = redisconn.sync_client(settings, socket_connect_timeout=5.0)
    deleted = 0
    try:
        for raw_video in client.sscan_iter(keys.videos_index(), count=500):
            video = raw_video.decode() if isinstance(raw_video, bytes) else str(raw_video)
            index = keys.buckets_index(video)
            old = client.zrangebyscore(index, "-inf", f"({oldest_kept}")
            if not old:
                continue
            buckets = [int(cast(bytes, b)) for b in old]
            doomed = [keys.bucket_counts(video, b) for b in buckets]
            doomed += [keys.viewers_sketch(video, b) for b in buckets]
            doomed += [keys.bucket_parts(video, b) for b in buckets]  # the state counter's parts
            pipe = client.pipeline(transaction=True)  # one video's keys share a hash slot
            pipe.delete(*doomed)
            pipe.zremrangebyscore(index, "-inf", f"({oldest_kept}")
            deleted += int(pipe.execute()[0])
        trending_keys = keys.trending(0).removesuffix("0") + "*"  # tally:{trending}:<bucket>
        for raw_key in client.scan_iter(match=trending_keys, count=500):
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            bucket = key.rsplit(":", 1)[-1]
            if bucket.isdigit() and int(bucket) < oldest_kept:
                deleted += int(client.delete(key))
    except redis.RedisError as exc:
        raise BatchError(
            f"cannot expire speed buckets in Redis at {settings.redis_url} ({exc}): "
            "start it with 'tally up' or set TALLY_REDIS_URL"
        ) from exc
    finally:
        client.close()
    return deleted


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit's application: compute one run (unpublished) and print its result as JSON."""
    parser = argparse.ArgumentParser(description="compute one Tally batch run, unpublished")
    parser.add_argument("--cutoff", type=int, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--payouts", action="store_true", help="also compute the payouts, kept aside")
    args = parser.parse_args(argv)
    settings = Settings()
    videos = _catalog(settings) if args.payouts else None
    result = compute_batch(settings, args.cutoff, run_id=args.run_id, videos=videos)
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
