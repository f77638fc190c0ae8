"""Airflow fixtures: one metadata database for the session (under a tmp AIRFLOW_HOME, the project's
DAGs folder, no examples), the DAG bag, and a writer of raw logs in the archiver's layout."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from counting.settings import Settings, settings_env
from tally.airflow import DAGS_FOLDER, airflow_command
from tests import logfiles


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """AIRFLOW_HOME for the session with a migrated metadata database; set before Airflow is
    first imported in this process (Airflow reads its home and config at import)."""
    if "airflow" in sys.modules:
        pytest.fail("Airflow was imported before the airflow_home fixture set AIRFLOW_HOME")
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "GX_ANALYTICS_ENABLED": "False",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        done = subprocess.run(
            [airflow_command(), "db", "migrate"], env=dict(os.environ), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        yield home
    # dag.test() points the logging handlers at pytest's captured output; py4j logs at INFO when
    # Spark's gateway is collected at exit, after that output is closed.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def dag_bag(airflow_home: Path) -> Any:
    """The project's DAGs, parsed as the DAG processor does, anew for each test: `dag.test(run_conf=
    ...)` leaves the run's params on the DAG object, so a shared one carried one test's
    `allow_decrease_reason` into the next test's runs (as a fresh parse per run does not in
    production)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=DAGS_FOLDER)


@pytest.fixture
def write_log() -> logfiles.WriteLog:
    """Write events under a raw directory in the archiver's hive layout."""
    return logfiles.write_log


@pytest.fixture
def tally_env(settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings as TALLY_* variables: the DAG's tasks read `Settings()` when they run."""
    for name, value in settings_env(settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "False")
    return settings
