"""Airflow on this machine: `tally airflow` stops everything it started within a task's grace, the
executor is sized to the machine, the archiver sensor is paced to the bucket, and a failed
validation's verdict is the first line a task logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from counting.event import Event
from counting.settings import Settings
from tally.airflow import DAGS_FOLDER, PROJECT_ROOT, airflow_env, machine_cores, stop_standalone
from tests.logfiles import hour_folder, log_rows, write_rows

# A stand-in for `airflow standalone`: it starts a component (a grandchild of the launcher, in its
# process group) and, on SIGINT, stops it and exits, unless told to ignore SIGINT (hung on a task).
_STANDALONE = """
import signal, subprocess, sys, time
component = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if sys.argv[1] == "hung":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def stop(*_):
        sys.exit(0)  # a component that outlives its launcher: the group must still end it
    signal.signal(signal.SIGINT, stop)
print(component.pid, flush=True)
while True:
    time.sleep(0.1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waits for its parent: it runs no more
        return stat.read().split()[2] != "Z"


@pytest.mark.serial  # timed: stopped within the timeout and the grace
@pytest.mark.parametrize("behaviour", ["stops", "hung"])
def test_stopping_standalone_ends_every_process_it_started(behaviour: str) -> None:
    standalone = subprocess.Popen(
        [sys.executable, "-c", _STANDALONE, behaviour], stdout=subprocess.PIPE, start_new_session=True
    )
    assert standalone.stdout is not None
    component = int(standalone.stdout.readline())
    started = time.monotonic()

    stop_standalone(standalone, timeout=2.0)

    deadline = time.monotonic() + 10
    while _alive(component) and time.monotonic() < deadline:
        time.sleep(0.1)
    standalone.stdout.close()
    assert standalone.poll() is not None
    assert not _alive(component)
    assert time.monotonic() - started < 2.0 + 5.0 + 2.0  # the timeout, then SIGTERM's grace


def test_the_executor_is_sized_to_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__CORE__PARALLELISM", raising=False)
    env = airflow_env(Settings(data_dir=tmp_path))
    assert env["AIRFLOW__CORE__PARALLELISM"] == str(machine_cores())
    assert 1 <= machine_cores() <= (os.cpu_count() or 1)
    monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "3")  # an operator's own choice stays
    assert airflow_env(Settings(data_dir=tmp_path))["AIRFLOW__CORE__PARALLELISM"] == "3"


_POKE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).get_dag("tally_batch")
print(json.dumps(dag.get_task("wait_for_archiver").poke_interval))
"""


@pytest.mark.parametrize(("bucket_ms", "poke"), [("2000", 2.0), ("10000", 10.0), (None, 10.0), ("300", 1.0)])
def test_the_archiver_sensor_pokes_once_a_bucket_at_most_once_a_minute(
    airflow_home: Path, bucket_ms: str | None, poke: float
) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("TALLY_BUCKET_MS", None)
    if bucket_ms is not None:
        env["TALLY_BUCKET_MS"] = bucket_ms
    done = subprocess.run(
        [sys.executable, "-c", _POKE, str(DAGS_FOLDER / "tally_batch.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == poke


# A task's process: Airflow loaded, logging at INFO, then the gate over a bad raw file.
_TASK = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s | %(message)s")
from airflow.sdk.exceptions import AirflowFailException
from counting.settings import Settings
from tally import pipeline
from tally.airflow import gate
print("=== the task starts", flush=True)
try:
    gate(lambda: pipeline.validate_raw(Settings(), None, int(sys.argv[1]), "interval-1"))
except AirflowFailException:
    print("=== the task failed", flush=True)
"""


@pytest.mark.slow
def test_a_failed_validation_logs_its_verdict_first(airflow_home: Path, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    hour = int(datetime(2026, 11, 20, 4, tzinfo=UTC).timestamp() * 1000)
    events = [
        Event(f"e{i}", "view", "vid-1", hour + i, session_id="s-1", watch_secs=40.0, ingest_ts=hour + 9 + i)
        for i in range(4)
    ]
    rows = log_rows(events)
    rows[2]["event_id"] = None
    write_rows(hour_folder(settings.raw_dir, hour), "events-p0-0-3.parquet", rows)
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "TALLY_DATA_DIR": str(settings.data_dir),
        "GX_ANALYTICS_ENABLED": "False",
        "PYTHONWARNINGS": "ignore",
    }

    script = tmp_path / "task.py"  # a file: PySpark takes a `python -c` main module for its doctests
    script.write_text(_TASK)

    done = subprocess.run(
        [sys.executable, str(script), str(hour + 3_600_000)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    logged = done.stdout.split("=== the task starts\n", 1)[1].splitlines()
    # (Airflow's own log format once it is loaded: time, level, message, logger.)
    assert "validation of the raw log read by run interval-1" in logged[0], logged[:5]
    assert "FAILED (1 expectations)" in logged[0] and "error" in logged[0]
    assert "event_id is present: 1 of 4 rows break it" in logged[1]
    assert logged[-1] == "=== the task failed"
    assert len(logged) < 10, textwrap.shorten(" / ".join(logged), 2000)
