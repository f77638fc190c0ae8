"""The Airflow tasks both DAGs run once a batch is computed: validate its outputs, publish the
baseline, write the payouts, build the warehouse. Each is one call into `tally.pipeline`, imported
inside the task so that parsing a DAG file stays cheap."""

from __future__ import annotations

from typing import Any

from airflow.sdk import task

from counting.settings import Settings


@task
def validate_outputs(run: dict[str, Any]) -> str:
    from tally import pipeline
    from tally.airflow import gate

    return gate(lambda: pipeline.validate_outputs(Settings(), run))


@task
def publish(run: dict[str, Any]) -> bool:
    from tally import pipeline

    return pipeline.publish(Settings(), run)


@task
def write_payouts(run: dict[str, Any]) -> int:
    from tally import pipeline

    return pipeline.write_payouts(Settings(), run)


@task
def build_warehouse() -> str:
    from tally import pipeline

    return pipeline.build_warehouse(Settings())


def after_compute(run: Any) -> list[Any]:
    """The tasks after `compute`, in their order (for `chain`)."""
    return [validate_outputs(run), publish(run), write_payouts(run), build_warehouse()]
