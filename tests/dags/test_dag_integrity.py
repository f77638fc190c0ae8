"""Every DAG imports cleanly, carries tags and retries, and does no I/O when it is parsed."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tally.airflow import DAGS_FOLDER, PROJECT_ROOT

# Airflow's standard provider imports a name Airflow itself deprecated (apache-airflow 3.3.0).
pytestmark = pytest.mark.filterwarnings(
    r"ignore:The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute is deprecated:FutureWarning"
)

EXPECTED = {"tally_batch", "tally_recompute"}

# Run in a fresh interpreter: import Airflow's SDK first, then watch the DAG file's own import
# through audit hooks: files opened other than Python sources, sockets, subprocesses.
_PROBE = """
import json, sys, runpy
# Airflow's own start-up (config, lazy imports such as croniter's platform probe) is not the DAG
# file's doing: load what the DAG files use before watching.
from airflow.sdk import CronDataIntervalTimetable, Param, chain, dag, task
task.sensor
events = []
ALLOWED = (".py", ".pyc", ".so", ".pth", ".typed")
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and not args[0].endswith(ALLOWED):
        if not args[0].startswith(("/proc", "/dev", "/sys")) and not args[0].endswith("__pycache__"):
            events.append(["open", args[0]])
    elif event in ("socket.connect", "subprocess.Popen", "os.system"):
        events.append([event, repr(args)[:200]])
sys.addaudithook(hook)
from counting import settings
_init = settings.Settings.__init__
def _spy(self, *args, **kwargs):
    events.append(["Settings()", "read at import"])
    _init(self, *args, **kwargs)
settings.Settings.__init__ = _spy
runpy.run_path(sys.argv[1])
heavy = [m for m in ("pyspark", "great_expectations", "redis", "duckdb") if m in sys.modules]
print(json.dumps({"io": events, "heavy": heavy}))
"""


def test_every_dag_imports_without_errors(dag_bag: Any) -> None:
    assert dag_bag.import_errors == {}
    assert set(dag_bag.dag_ids) == EXPECTED


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_has_tags_retries_and_one_active_run(dag_bag: Any, dag_id: str) -> None:
    dag = dag_bag.get_dag(dag_id)
    assert "tally" in dag.tags
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    no_retries = [t.task_id for t in dag.tasks if t.retries < 1]
    assert no_retries == []
    assert all(t.retry_delay.total_seconds() > 0 for t in dag.tasks)


def test_batch_dag_runs_its_steps_in_order(dag_bag: Any) -> None:
    dag = dag_bag.get_dag("tally_batch")
    order = [
        "cutoff",
        "wait_for_archiver",
        "validate_raw",
        "compute",
        "validate_outputs",
        "publish",
        "write_payouts",
        "announce_milestones",
        "compact_log",
        "build_warehouse",
        "expire_speed_buckets",
    ]
    for before, after in itertools.pairwise(order):
        assert after in dag.get_task(before).get_direct_relative_ids(upstream=False)


@pytest.mark.parametrize("dag_file", sorted(p.name for p in DAGS_FOLDER.glob("*.py")))
def test_parsing_a_dag_file_does_no_io(airflow_home: Path, dag_file: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "TALLY_DATA_DIR": "/nonexistent/tally-data"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(DAGS_FOLDER / dag_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"io": [], "heavy": []}
