"""Airflow like production: `tally airflow --executor local --db postgresql+psycopg://…` keeps the
metadata in a PostgreSQL database and runs tasks on the LocalExecutor; a `tally_batch` run triggered
through the REST API moves the served baseline to its cutoff. A wrong database URL fails before
anything is migrated, naming the option and what to do."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
import sqlalchemy as sa
from pyspark.sql import SparkSession

from counting.event import Event, event_from_dict, stamped
from counting.settings import Settings, settings_env
from counting.traffic import TrafficConfig, catalog_rows, generate
from tally import pipeline
from tally.airflow import (
    ADMIN,
    PROJECT_ROOT,
    STOP_TIMEOUT_SECONDS,
    check_metadata_db,
    metadata_env,
    passwords_file,
    run_airflow,
)
from tally.errors import StackError
from tally.services import free_port
from tests.logfiles import oracle_rows
from tests.postgres import ADMIN_URL, fresh_database, require_server
from tests.writers import writers
from warehouse.baseline import current_baseline
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

HOUR_MS = 3_600_000
DAG = "tally_batch"
STARTUP_SECONDS = 180
RUN_SECONDS = 300
# Only the run the test triggers: the scheduler creates no run of its own for the latest interval.
TEST_ONLY_ENV = {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"}


def _libpq(url: str) -> str:
    """A SQLAlchemy URL as psycopg takes it."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def airflow_db() -> Iterator[str]:
    """A fresh PostgreSQL database on the machine's server (dropped at the end), as the URL a user
    gives `tally airflow --db`."""
    with fresh_database("tally_airflow") as url:
        yield url


# --- a wrong database URL fails fast ---------------------------------------------------------------


def test_a_database_nobody_listens_on_fails_before_migrating(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    port = free_port()
    url = f"postgresql+psycopg://airflow:s3cret-pw@127.0.0.1:{port}/airflow"

    with pytest.raises(StackError) as raised:
        run_airflow(settings, free_port(), db_url=url, executor="local")

    message = str(raised.value)
    assert f"not reachable at 127.0.0.1:{port}/airflow" in message
    assert "--db / TALLY_AIRFLOW_DB_URL" in message
    assert f"postgresql+psycopg://airflow:***@127.0.0.1:{port}/airflow" in message
    assert "s3cret-pw" not in message
    assert f"createdb -h 127.0.0.1 -p {port} -U airflow airflow" in message
    assert "Connection refused" in message
    assert not settings.airflow_home.exists()  # nothing was migrated


@pytest.mark.serial  # timed: the refusal within 5 s
def test_a_server_that_never_answers_fails_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()

        with pytest.raises(StackError, match=rf"not reachable at 127\.0\.0\.1:{port}/airflow .*2 s timeout"):
            check_metadata_db(f"postgresql+psycopg://postgres@127.0.0.1:{port}/airflow", timeout=2)

    assert time.monotonic() - started < 5


@pytest.mark.integration
def test_a_database_not_created_fails_naming_createdb() -> None:
    url = sa.make_url(ADMIN_URL).set(drivername="postgresql+psycopg", database="tally_no_such_db")
    require_server()

    with pytest.raises(StackError) as raised:
        check_metadata_db(url.render_as_string(hide_password=False))

    message = str(raised.value)
    assert f"{url.host}:{url.port or 5432}/tally_no_such_db" in message
    assert 'database "tally_no_such_db" does not exist' in message
    assert f"createdb -h {url.host} -p {url.port or 5432} -U {url.username} tally_no_such_db" in message


@pytest.mark.parametrize(
    "bad",
    [
        "mysql://airflow:pw@127.0.0.1/airflow",
        "postgresql+asyncpg://airflow:pw@127.0.0.1/airflow",
        "postgresql+psycopg://airflow:pw@127.0.0.1:54x/airflow",
        "postgresql+psycopg://airflow:pw@127.0.0.1:5432",
        "127.0.0.1:5432/airflow",
    ],
)
def test_a_url_that_is_no_postgresql_database_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(StackError, match="--db / TALLY_AIRFLOW_DB_URL") as raised:
        metadata_env(bad, None)

    assert "postgresql+psycopg://user:password@host:5432/airflow" in str(raised.value)
    assert ":pw@" not in str(raised.value)


def test_the_metadata_database_and_executor_as_airflow_variables() -> None:
    assert metadata_env(None, None) == {}  # SQLite under AIRFLOW_HOME, Airflow's default executor
    assert metadata_env("postgresql://u:p@db:5433/af?sslmode=require", " Local") == {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg://u:p@db:5433/af?sslmode=require",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "postgresql+psycopg_async://u:p@db:5433/af?sslmode=require",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    }
    with pytest.raises(
        StackError, match=r"--executor / TALLY_AIRFLOW_EXECUTOR must be one of local \(got 'celery'\)"
    ):
        metadata_env(None, "celery")


# --- a batch run on Airflow with its metadata in PostgreSQL ----------------------------------------


def _traffic(start_ms: int) -> tuple[TrafficConfig, list[Event]]:
    """About two hours of traffic from `start_ms`, bots and retries included, as the log holds it."""
    config = TrafficConfig(
        seed=7,
        videos=12,
        viewers=150,
        events=2_400,
        rate=0.35,
        start_ms=start_ms,
        bot_fraction=0.1,
        retry_rate=0.05,
        warm_start=False,
    )
    events = []
    for item in generate(config):
        ingest_ts = start_ms + item.send_at_ms
        events.append(stamped(event_from_dict(item.event, now_ms=ingest_ts), ingest_ts))
    return config, events


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


@dataclass(frozen=True)
class _Proc:
    parent: int
    session: int
    started: int  # clock ticks after boot: a pid used again is another process
    command: str


def _processes() -> dict[int, _Proc]:
    """The machine's live processes (zombies left out: they run no more)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if fields[0] != "Z":
            found[int(entry.name)] = _Proc(int(fields[1]), int(fields[3]), int(fields[19]), command)
    return found


class _Started:
    """Every process a root process started, as seen while it ran (the components, the executor's
    workers, the tasks and what they started, Spark's JVMs included), and the sessions they ran in:
    after it stops, none of them may be left, reparented or not. (Their environment is no clue:
    Airflow's `setproctitle` overwrites what /proc shows of it.)"""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, _Proc] = {}
        self.sessions: set[int] = set()

    def look(self) -> None:
        table = _processes()
        tree, frontier = set(), [self.root]
        while frontier:
            pid = frontier.pop()
            if pid in table and pid not in tree:
                tree.add(pid)
                frontier += [child for child, proc in table.items() if proc.parent == pid]
        for pid in tree:
            self.seen[pid] = table[pid]
            self.sessions.add(table[pid].session)
        self.sessions.discard(os.getsid(0))  # the test's own session is not theirs

    def left(self) -> dict[int, str]:
        return {
            pid: proc.command
            for pid, proc in _processes().items()
            if proc.session in self.sessions or (pid in self.seen and self.seen[pid].started == proc.started)
        }

    def commands(self) -> set[str]:
        return {proc.command for proc in self.seen.values()}


def _wait_for(what: str, check: Callable[[], Any], seconds: float, alive: Callable[[], None]) -> Any:
    """Poll `check` until it returns something truthy; `alive` raises if Airflow has exited."""
    deadline = time.monotonic() + seconds
    while True:
        alive()
        try:
            found = check()
        except httpx.TransportError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds} s waiting for {what}")
        time.sleep(1)


class _Airflow:
    """`tally airflow --executor local --db URL` as a user starts it, on a free port, and its API."""

    def __init__(self, settings: Settings, db_url: str, output: Path) -> None:
        self.settings = settings
        self.home = settings.airflow_home.resolve()
        self.base = f"http://127.0.0.1:{free_port()}"
        self.output = output
        env = {
            **os.environ,
            **settings_env(settings),
            "PYTHONPATH": str(PROJECT_ROOT),
            # the scheduler's and triggerer's log servers, off the ports a user's Airflow holds
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            **TEST_ONLY_ENV,
        }
        command = [
            sys.executable,
            "-m",
            "tally.cli",
            "airflow",
            "--data-dir",
            str(settings.data_dir),
            "--port",
            self.base.rsplit(":", 1)[1],
            "--executor",
            "local",
            "--db",
            db_url,
        ]
        with output.open("wb") as sink:  # its own session: a Ctrl-C in the test's terminal is not its
            self.process = subprocess.Popen(
                command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started = _Started(self.process.pid)
        self.client = httpx.Client(base_url=self.base, timeout=30)

    def alive(self) -> None:
        self.started.look()
        if self.process.poll() is not None:
            pytest.fail(
                f"tally airflow exited ({self.process.returncode}):\n{self.output.read_text()[-4000:]}"
            )

    def log_in(self) -> None:
        """Wait until every component is healthy, then trade the admin's password for a JWT."""

        def healthy() -> bool:
            health = self.client.get("/api/v2/monitor/health")
            return health.status_code == 200 and all(c["status"] == "healthy" for c in health.json().values())

        _wait_for("Airflow's API to answer healthy", healthy, STARTUP_SECONDS, self.alive)
        password = _wait_for(
            "the admin's password", lambda: _read_password(passwords_file(self.settings)), 30, self.alive
        )
        answer = self.client.post("/auth/token", json={"username": ADMIN, "password": password})
        assert answer.is_success, answer.text
        self.client.headers["Authorization"] = f"Bearer {answer.json()['access_token']}"

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.client.request(method, f"/api/v2{path}", **kwargs)
        assert answer.is_success, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances")[
            "task_instances"
        ]
        return found

    def failure(self, run_id: str, instances: list[dict[str, Any]]) -> str:
        """The task states and, for the tasks that failed, their log files and the end of the log."""
        lines = [f"{ti['task_id']}: {ti['state']} (try {ti['try_number']})" for ti in instances]
        for ti in instances:
            if ti["state"] in ("failed", "up_for_retry", "upstream_failed"):
                folder = (
                    self.home / "logs" / f"dag_id={DAG}" / f"run_id={run_id}" / f"task_id={ti['task_id']}"
                )
                for log in sorted(folder.glob("*.log")):
                    lines += [f"--- {log}", log.read_text()[-3000:]]
        return "\n".join(lines)

    def stop(self) -> int:
        """Ctrl-C, as a user stops it: SIGINT to `tally airflow` alone, which stops standalone."""
        self.started.look()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        self.client.close()
        try:
            return self.process.wait(STOP_TIMEOUT_SECONDS + 30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"tally airflow did not stop within {STOP_TIMEOUT_SECONDS + 30} s of a Ctrl-C")


def _read_password(path: Path) -> str | None:
    try:
        password: str = json.loads(path.read_text())[ADMIN]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    return password


@pytest.fixture
def airflow(settings: Settings, airflow_db: str, tmp_path: Path) -> Iterator[_Airflow]:
    """Airflow started by the real `tally airflow` code path (not yet waited for); stopped with a
    Ctrl-C at the end, after which no process it started may be left."""
    running = _Airflow(settings, airflow_db, tmp_path / "tally-airflow.out")
    try:
        yield running
    finally:
        code = running.stop()
        deadline = time.monotonic() + 15
        while (left := running.started.left()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in left:  # ours: end them, then fail
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left after tally airflow stopped: {left}"
        assert code == 0, running.output.read_text()[-4000:]


@pytest.mark.slow
@pytest.mark.integration
def test_a_batch_run_triggered_through_the_api_runs_with_postgres_and_the_local_executor(
    airflow: _Airflow,
    airflow_db: str,
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
) -> None:
    start = int(datetime(2026, 11, 20, 4, tzinfo=UTC).timestamp() * 1000)
    previous_cutoff, cutoff = start + HOUR_MS, start + 2 * HOUR_MS
    config, events = _traffic(start)
    assert max(e.ingest_ts or 0 for e in events) > cutoff  # the run's interval is full, and closed
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(config))
    # The archiver's log and watermark, and the previous interval's run, published (while Airflow
    # starts).
    with writers(settings, spark=lambda: spark) as tally:
        tally.ingest(events)
        tally.archive()
        tally.batch(previous_cutoff, run_id=pipeline.interval_run_id(previous_cutoff))
    before = current_baseline(settings.baselines_dir)
    assert before is not None and before.cutoff == previous_cutoff

    airflow.log_in()
    _wait_for("the DAG processor to parse tally_batch", lambda: _dag_known(airflow), 120, airflow.alive)
    assert airflow.api("PATCH", f"/dags/{DAG}", json={"is_paused": False})["is_paused"] is False
    run_id = f"manual-{cutoff}"
    airflow.api(
        "POST",
        f"/dags/{DAG}/dagRuns",
        json={
            "dag_run_id": run_id,
            "logical_date": _iso(previous_cutoff),
            "data_interval_start": _iso(previous_cutoff),
            "data_interval_end": _iso(cutoff),
            "conf": {},
        },
    )

    def finished() -> str | None:
        state: str = airflow.api("GET", f"/dags/{DAG}/dagRuns/{run_id}")["state"]
        instances = airflow.task_instances(run_id)
        if state == "failed" or any(ti["state"] in ("failed", "up_for_retry") for ti in instances):
            pytest.fail(f"run {run_id} failed:\n{airflow.failure(run_id, instances)}")
        return state if state == "success" else None

    _wait_for(f"run {run_id} to succeed", finished, RUN_SECONDS, airflow.alive)

    served = current_baseline(settings.baselines_dir)
    assert served is not None
    assert (served.run_id, served.cutoff) == (f"interval-{cutoff}", cutoff)
    assert served.rows == oracle_rows(events, cutoff)
    # The metadata is in the fresh PostgreSQL database, none in a SQLite file under the home.
    with psycopg.connect(_libpq(airflow_db)) as db:
        runs = db.execute("select run_id, state from dag_run where dag_id = %s", (DAG,)).fetchall()
        tasks = db.execute(
            "select t.task_id, t.state, t.hostname, j.job_type, t.id::text from task_instance t "
            "join job j on j.id = t.queued_by_job_id where t.run_id = %s",
            (run_id,),
        ).fetchall()
    assert runs == [(run_id, "success")]
    assert {task for task, *_ in tasks} == {t["task_id"] for t in airflow.task_instances(run_id)}
    assert {(state, host, job) for _, state, host, job, _ in tasks} == {
        ("success", socket.gethostname(), "SchedulerJob")
    }
    assert not (airflow.home / "airflow.db").exists()
    # The LocalExecutor ran them: a task's process ("airflow worker -- <task instance id>") is the
    # child of one of the executor's workers ("airflow worker -- LocalExecutor: …").
    seen = airflow.started.seen
    executor_workers = {pid for pid, p in seen.items() if "airflow worker -- LocalExecutor" in p.command}
    ran_by = {
        found.group(1): p.parent
        for p in seen.values()
        if (
            found := re.search(r"airflow worker -- ([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})$", p.command)
        )
    }
    assert executor_workers and ran_by, airflow.started.commands()
    assert set(ran_by) <= {ti_id for *_, ti_id in tasks}
    assert set(ran_by.values()) <= executor_workers
    assert "executor: LocalExecutor" in airflow.output.read_text()


def _dag_known(airflow: _Airflow) -> bool:
    answer = airflow.client.get(f"/api/v2/dags/{DAG}")
    return answer.status_code == 200
