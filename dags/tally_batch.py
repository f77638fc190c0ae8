"""Tally's scheduled batch, one run per data interval: wait for the archiver to close the interval's
end (the cutoff), validate every raw file the run reads that is not yet validated (whatever interval
it belongs to: skipped intervals and changed files included), compute (payouts too, kept aside),
validate the outputs, publish the baseline, write payouts, build the warehouse, expire old speed
buckets.

Every task is keyed by the data interval (run id `interval-<cutoff ms>`): clearing or backfilling an
interval rewrites what it wrote. A failed validation fails its task at once (no retries) and
nothing after it runs: the served baseline stays and no payout is written. After a data repair
that lowers the counts, trigger a run with `--conf '{"allow_decrease_reason": "why"}'`: its views
may fall below the served ones, and the reason is recorded with the run. Results: the data docs
under `$TALLY_DATA_DIR/quality/`. Schedule: `TALLY_BATCH_SCHEDULE` (a cron expression in UTC, hourly
by default); its interval ends must be bucket edges (`TALLY_BUCKET_MS`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, chain, dag, task

from counting.settings import Settings
from tally.tasks import after_compute, run_params

SCHEDULE = os.environ.get("TALLY_BATCH_SCHEDULE", "0 * * * *")


def _poke_seconds(bucket_ms: str | None, grace_ms: str | None) -> float:
    """How often the archiver sensor pokes: a cutoff closes a grace (the producer's delivery
    timeout) after the interval ends, so the first poke, at the end, usually comes too early; the
    next comes two graces later (at most once a bucket and once a minute, at least once a second)."""
    try:
        bucket_s = int(bucket_ms or 3_600_000) / 1000
        grace_s = int(grace_ms or 5_000) / 1000
    except ValueError:
        return 60.0
    return max(1.0, min(60.0, bucket_s, 2 * grace_s))


POKE_SECONDS = _poke_seconds(os.environ.get("TALLY_BUCKET_MS"), os.environ.get("TALLY_DELIVERY_TIMEOUT_MS"))


@dag(
    dag_id="tally_batch",
    schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["tally"],
    default_args={"owner": "tally", "retries": 2, "retry_delay": timedelta(minutes=2)},
    params=run_params(),
    doc_md=__doc__,
)
def tally_batch() -> None:
    @task
    def cutoff(data_interval_end: datetime | None = None, dag_run: Any = None) -> int:
        from tally import pipeline

        return pipeline.run_cutoff(Settings(), data_interval_end, dag_run.run_after)

    @task.sensor(poke_interval=POKE_SECONDS, timeout=6 * 3600, mode="reschedule")
    def wait_for_archiver(cutoff: int) -> bool:
        from tally import pipeline

        return pipeline.wait_for_cutoff(Settings(), cutoff)

    @task
    def validate_raw(cutoff: int, data_interval_start: datetime | None = None) -> str:
        from tally import pipeline
        from tally.airflow import gate

        since = int(data_interval_start.timestamp() * 1000) if data_interval_start else None
        run_id = pipeline.interval_run_id(cutoff)
        return gate(lambda: pipeline.validate_raw(Settings(), since, cutoff, run_id))

    @task
    def compute(cutoff: int) -> dict[str, Any]:
        from tally import pipeline

        return pipeline.compute(Settings(), cutoff, pipeline.interval_run_id(cutoff))

    @task
    def expire_speed_buckets(cutoff: int) -> int:
        from tally import pipeline

        return pipeline.expire_speed_buckets(Settings(), now_ms=cutoff)

    edge = cutoff()
    run = compute(edge)
    chain(wait_for_archiver(edge), validate_raw(edge), run, *after_compute(run), expire_speed_buckets(edge))


tally_batch()
