"""Full recompute of a range of days, triggered by hand (after a rules change, or to repair data):
validate every raw file the recompute reads that is not yet validated with its current checksum,
recompute every count from the whole log up to the end of the range (capped by the archiver
watermark), validate the outputs, publish, write payouts, build the warehouse.

Trigger with `airflow dags trigger tally_recompute --conf '{"start": "2026-11-01", "end": "2026-11-21"}'`
(`end` may be left out: up to the latest closed cutoff). The run id is `recompute-<cutoff ms>`: the
same range triggered again rewrites the same outputs. A run whose cutoff is older than the served
baseline's rewrites its outputs and payouts but leaves the served baseline as it is. After a data
repair that lowers the counts, add `"allow_decrease_reason": "why"` to the conf: views may then fall
below the served ones, and the reason is recorded with the run.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow.sdk import Param, chain, dag, task

from counting.settings import Settings
from tally.tasks import after_compute, run_params


@dag(
    dag_id="tally_recompute",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["tally"],
    default_args={"owner": "tally", "retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "start": Param(type="string", format="date", description="first day to recompute and validate (UTC)"),
        "end": Param(
            None,
            type=["null", "string"],
            format="date",
            description="last day (UTC, inclusive); empty: up to the latest closed cutoff",
        ),
        **run_params(),
    },
    doc_md=__doc__,
)
def tally_recompute() -> None:
    @task
    def bounds(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from tally import pipeline

        assert params is not None
        end = date.fromisoformat(params["end"]) if params.get("end") else None
        return pipeline.recompute_bounds(Settings(), date.fromisoformat(params["start"]), end)

    @task
    def validate_raw(span: dict[str, Any]) -> str:
        from tally import pipeline
        from tally.airflow import gate

        return gate(lambda: pipeline.validate_raw(Settings(), span["since"], span["cutoff"], span["run_id"]))

    @task
    def compute(span: dict[str, Any]) -> dict[str, Any]:
        from tally import pipeline

        return pipeline.compute(Settings(), span["cutoff"], span["run_id"])

    span = bounds()
    run = compute(span)
    chain(validate_raw(span), run, *after_compute(run))


tally_recompute()
