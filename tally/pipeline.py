"""The steps of a scheduled batch run as plain functions, one per Airflow task, each keyed by the
data interval so that a re-run of an interval replaces what it wrote.

wait for the cutoff → validate the raw partitions → compute → validate the outputs → publish →
write payouts → build the warehouse → expire old speed buckets.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import redis

from batch_layer.cutoff import check_on_bucket_edge, read_watermark, require_closed_cutoff
from batch_layer.errors import BatchError, CutoffNotClosed, WatermarkUnavailable
from batch_layer.job import BatchResult, compute_batch, publish_batch
from counting import keys
from counting.settings import Settings, settings_env
from warehouse.baseline import current_baseline, read_pointer

log = logging.getLogger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The packages a cluster's executors import (shipped with `spark-submit --py-files`).
_SHIPPED_PACKAGES = ("batch_layer", "counting", "warehouse")


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
    return moment - moment % settings.bucket_ms


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
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5.0)
    try:
        watermark = read_watermark(client, settings.redis_url)
    finally:
        client.close()
    edge = min(before, watermark)
    return edge - edge % settings.bucket_ms


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


def validate_raw(settings: Settings, since: int | None, cutoff: int) -> str:
    """Validate the raw partitions of [since, cutoff); raise `ValidationFailed` if any rule breaks.
    Without `since` (a run without a data interval): from the served baseline's cutoff, or the
    whole log when none is served. Returns the summary (its data docs paths included)."""
    from quality import require_valid
    from quality import validate_raw as check

    if since is None:
        served = read_pointer(settings.baselines_dir)
        since = int(str(served["cutoff"])) if served is not None else 0
    return require_valid(check(settings, cutoff, since)).summary()


def compute(settings: Settings, cutoff: int, run_id: str) -> dict[str, Any]:
    """Compute the run's outputs aside, unpublished (local Spark, or spark-submit to the configured
    cluster). Returns the `BatchResult` as a plain dict (what an XCom carries)."""
    if settings.spark_master.startswith("local"):
        result = compute_batch(settings, cutoff, run_id=run_id)
    else:
        result = compute_with_spark_submit(settings, cutoff, run_id)
    return asdict(result)


def validate_outputs(settings: Settings, run: Mapping[str, Any]) -> str:
    """Validate a computed run against the log and the served baseline; raise `ValidationFailed`
    if any rule breaks. Returns the summary."""
    from quality import require_valid
    from quality import validate_outputs as check

    result = BatchResult(**run)
    previous = current_baseline(settings.baselines_dir)
    report = check(settings, result.run_id, result.cutoff, result.rules_version, previous)
    return require_valid(report).summary()


def publish(settings: Settings, run: Mapping[str, Any]) -> bool:
    """Switch readers to the run's baseline unless a later cutoff is already served (a backfill of
    an old interval rewrites its outputs but never moves the served baseline back). True if switched."""
    result = BatchResult(**run)
    served = current_baseline(settings.baselines_dir)
    if served is not None and served.cutoff > result.cutoff:
        log.warning(
            "kept baseline %s (cutoff %s): run %s has an earlier cutoff",
            served.run_id,
            served.cutoff,
            result.run_id,
        )
        return False
    publish_batch(settings, result)
    return True


def write_payouts(settings: Settings, run: Mapping[str, Any]) -> int:
    """Compute and write the run's payout ledger rows (replacing the run's earlier rows); returns
    how many. Migrates the relational store first (a no-op when it is current)."""
    from batch_layer.payouts import run_payouts
    from warehouse.migrate import migrate

    result = BatchResult(**run)
    migrate(settings.store_url)
    return len(run_payouts(settings, result.run_id, result.cutoff))


def build_warehouse(settings: Settings) -> str:
    """Rebuild the analysts' DuckDB file from the published baseline, the log and the store."""
    from warehouse.build import build_warehouse as build

    return str(build(settings).path)


def expire_speed_buckets(settings: Settings, now_ms: int) -> int:
    """Delete the speed layer's per-bucket keys older than the retention: each video's bucket
    counts and viewer sketches (and their entries in its bucket index), and the trending sets.
    Returns how many keys were deleted. Idempotent; the counter's own key expiry does most of it."""
    oldest_kept = (now_ms - settings.retention_ms) // settings.bucket_ms
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5.0)
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
            pipe = client.pipeline(transaction=True)  # one video's keys share a hash slot
            pipe.delete(*doomed)
            pipe.zremrangebyscore(index, "-inf", f"({oldest_kept}")
            deleted += int(pipe.execute()[0])
        trending_keys = keys.trending(0).removesuffix("0") + "*"  # tally:trending:<bucket>
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


def _py_files(folder: Path) -> Path:
    """A zip of the packages the executors import, for `spark-submit --py-files`."""
    archive = folder / "tally-batch.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for package in _SHIPPED_PACKAGES:
            for path in sorted((_PROJECT_ROOT / package).rglob("*.py")):
                bundle.write(path, path.relative_to(_PROJECT_ROOT).as_posix())
    return archive


def spark_submit_command(settings: Settings, cutoff: int, run_id: str, py_files: Path) -> list[str]:
    """The spark-submit command line that computes one run on `settings.spark_master`."""
    submit = shutil.which("spark-submit") or str(Path(sys.executable).parent / "spark-submit")
    return [
        submit,
        "--master",
        settings.spark_master,
        "--name",
        f"tally-batch-{run_id}",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--py-files",
        str(py_files),
        str(Path(__file__).resolve()),
        "--cutoff",
        str(cutoff),
        "--run-id",
        run_id,
    ]


def compute_with_spark_submit(settings: Settings, cutoff: int, run_id: str) -> BatchResult:
    """Compute a run through `spark-submit` (client mode: this machine runs the driver, so the
    data directory must be storage the cluster's executors also see). Settings go by TALLY_* env."""
    with tempfile.TemporaryDirectory(prefix="tally-submit-") as folder:
        command = spark_submit_command(settings, cutoff, run_id, _py_files(Path(folder)))
        env = {**os.environ, **_spark_env(), **settings_env(settings)}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BatchError(f"spark-submit of run {run_id!r} failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BatchError(f"spark-submit of run {run_id!r} printed no result: {done.stdout[-2000:]}")
    return BatchResult(**json.loads(lines[-1]))


def _spark_env() -> dict[str, str]:
    """SPARK_HOME (default: the pyspark package's own distribution) and this interpreter as the
    driver's Python (client mode: the driver runs here and imports the project)."""
    import pyspark

    return {
        "SPARK_HOME": os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).resolve().parent),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit's application: compute one run (unpublished) and print its result as JSON."""
    parser = argparse.ArgumentParser(description="compute one Tally batch run, unpublished")
    parser.add_argument("--cutoff", type=int, required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args(argv)
    result = compute_batch(Settings(), args.cutoff, run_id=args.run_id)
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
