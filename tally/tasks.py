"""The Airflow tasks both DAGs run once a batch is computed: validate its outputs, publish the
baseline, write the payouts, announce the milestones it reached, compact the log's closed hours,
build the warehouse. Each is one call into `tally`, imported inside the task so that parsing a DAG
file stays cheap."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, task

from counting.settings import Settings

# The run's parameter (`--conf '{"allow_decrease_reason": "..."}'`) that lets a run publish views
# below the served ones after a data repair; recorded with the run.
ALLOW_DECREASE = "allow_decrease_reason"


def run_params() -> dict[str, Param]:
    """The parameters both DAGs take."""
    return {
        ALLOW_DECREASE: Param(
            None,
            type=["null", "string"],
            minLength=1,
            description=(
                "after a data repair: why this run may publish views below the served baseline's "
                "(recorded with the run); empty: a fall the bot rules do not explain fails "
                "validate_outputs"
            ),
        ),
    }


def _reason(params: dict[str, Any] | None) -> str | None:
    return (params or {}).get(ALLOW_DECREASE) or None


@task
def validate_outputs(run: dict[str, Any], params: dict[str, Any] | None = None) -> str:
    from tally import pipeline
    from tally.airflow import gate

    return gate(lambda: pipeline.validate_outputs(Settings(), run, _reason(params)))


@task
def publish(run: dict[str, Any], params: dict[str, Any] | None = None) -> bool:
    """Publish the run; one that read no event is skipped (and the tasks after it), as `tally batch
    run` refuses it: an empty baseline would serve zeros for every video."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tally import pipeline

    if run.get("events_read") == 0:
        raise AirflowSkipException(
            f"run {run.get('run_id')} read no event (the log holds none ingested before its cutoff "
            f"{run.get('cutoff')}): nothing is published, the served baseline stays"
        )
    return pipeline.publish(Settings(), run, _reason(params))


@task
def write_payouts(run: dict[str, Any]) -> int:
    from tally import pipeline

    return pipeline.write_payouts(Settings(), run)


@task
def announce_milestones() -> dict[str, Any]:
    from tally.milestones import announce

    return announce(Settings()).__dict__


@task
def compact_log(run: dict[str, Any]) -> dict[str, Any]:
    from tally import pipeline

    return pipeline.compact_log(Settings(), int(run["cutoff"]))


@task
def build_warehouse() -> str:
    from tally import pipeline

    return pipeline.build_warehouse(Settings())


def after_compute(run: Any) -> list[Any]:
    """The tasks after `compute`, in their order (for `chain`)."""
    return [
        validate_outputs(run),
        publish(run),
        write_payouts(run),
        announce_milestones(),
        compact_log(run),
        build_warehouse(),
    ]
