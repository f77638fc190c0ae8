"""`tally airflow`: Airflow on this machine (standalone: API server and UI, scheduler, DAG processor,
triggerer) with the project's DAGs and a metadata database under the data directory."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from counting.settings import Settings
from tally.errors import StackError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DAGS_FOLDER = PROJECT_ROOT / "dags"
DEFAULT_PORT = 8080
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
ADMIN = "admin"
# What a running task gets to clean up after SIGTERM before Airflow kills it; `tally airflow` gives
# `airflow standalone` that long (and a margin) to stop its components before it ends them itself.
TASK_GRACE_SECONDS = 60
STOP_TIMEOUT_SECONDS = TASK_GRACE_SECONDS + 15
# Libraries whose INFO logging buries a failed validation's verdict in a task's log.
NOISY_LOGGERS = ("great_expectations", "alembic", "py4j", "numexpr", "altair", "matplotlib")

T = TypeVar("T")
log = logging.getLogger(__name__)


def machine_cores() -> int:
    """The cores this process may run on (what the LocalExecutor's parallelism is sized to: every
    task runs local Spark, which would share them anyway)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def airflow_env(settings: Settings, port: int = DEFAULT_PORT) -> dict[str, str]:
    """The environment Airflow runs with: its home under the data directory, the project's DAGs
    folder, no examples, the UI and API on 127.0.0.1:`port`, and the settings as TALLY_* variables
    (so every task reads the same data directory, Redis and bucket width)."""
    from tally.pipeline import settings_env

    python_path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **settings_env(settings),
        "AIRFLOW_HOME": str(settings.airflow_home.resolve()),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        # The LocalExecutor forks `parallelism` workers (32 by default): size it to the machine.
        "AIRFLOW__CORE__PARALLELISM": os.environ.get("AIRFLOW__CORE__PARALLELISM", str(machine_cores())),
        "AIRFLOW__CORE__KILLED_TASK_CLEANUP_TIME": str(TASK_GRACE_SECONDS),
        "GX_ANALYTICS_ENABLED": "False",
        "PYTHONPATH": python_path,
        # `airflow standalone` starts its components as `airflow …` from the PATH.
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
    }


def airflow_command() -> str:
    """The `airflow` executable next to this interpreter (the project's virtual environment)."""
    beside = Path(sys.executable).parent / "airflow"
    found = str(beside) if beside.exists() else shutil.which("airflow")
    if found is None:
        raise StackError("the 'airflow' command is not installed: run 'make install'")
    return found


def passwords_file(settings: Settings) -> Path:
    """Where Airflow's simple auth manager writes the generated password of `admin`."""
    return settings.airflow_home.resolve() / PASSWORDS_FILE


def login_help(settings: Settings, port: int = DEFAULT_PORT) -> str:
    return (
        f"Airflow UI: http://127.0.0.1:{port}/  (user '{ADMIN}'; the password is generated on the\n"
        f"first start and kept in {passwords_file(settings)}, e.g.\n"
        f"  python -c \"import json; print(json.load(open('{passwords_file(settings)}'))['{ADMIN}'])\")"
    )


def migrate_metadata(settings: Settings, env: Mapping[str, str]) -> None:
    """`airflow db migrate`: create or upgrade the metadata database under the data directory."""
    settings.airflow_home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [airflow_command(), "db", "migrate"], env={**os.environ, **env}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise StackError(f"'airflow db migrate' failed ({done.returncode}): {done.stderr[-2000:]}")


def run_airflow(settings: Settings, port: int = DEFAULT_PORT) -> int:
    """Migrate the metadata database, then run `airflow standalone` in the foreground until Ctrl-C
    (or SIGTERM), which stops every component it started (see `stop_standalone`).

    Standalone runs in a session of its own, so the terminal's Ctrl-C reaches only this process,
    which then stops it in order, instead of every component and running task at once."""
    env = airflow_env(settings, port)
    migrate_metadata(settings, env)
    print(login_help(settings, port), flush=True)
    process = subprocess.Popen(
        [airflow_command(), "standalone"], env={**os.environ, **env}, start_new_session=True
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        print("stopping Airflow (Ctrl-C again to kill it now) ...", flush=True)
        return stop_standalone(process)
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_standalone(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_SECONDS) -> int:
    """Stop `airflow standalone` (the leader of its own process group) the way it expects: SIGINT,
    upon which it stops its components (SIGTERM would orphan them) and they their tasks. If it has
    not finished after `timeout` seconds (a task's grace and a margin), or on a second Ctrl-C, its
    whole group is terminated, then killed; whatever of the group outlives it is ended too, so
    nothing it started keeps running."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _end_group(process)
        return process.wait()
    _end_group(process)
    return code


def _end_group(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM every process left in `process`'s group (it leads it), then SIGKILL the group if any
    is alive after `grace` seconds."""
    group = process.pid
    if not _signal_group(group, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        process.poll()  # reap the leader once it exits: a zombie still counts in its group
        if not _signal_group(group, 0):
            return
        time.sleep(0.1)
    _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, sig: int) -> bool:
    """Send `sig` to the process group; False if no process is left in it."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member of another user (or a zombie on some systems): leave it
        return False
    return True


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def quiet_libraries() -> None:
    """Raise the noisy libraries' loggers to WARNING (Great Expectations logs some 200 INFO lines
    as it loads, which would bury a validation's verdict in the task log)."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def gate(check: Callable[[], T]) -> T:
    """Run a data-quality gate in an Airflow task, its verdict the first line it logs: the noisy
    libraries are quieted before anything imports them. A failed validation (or a run that read an
    unvalidated file) fails the task at once, without retries (the data will not get better by
    waiting); other errors retry as usual."""
    quiet_libraries()
    from airflow.sdk.exceptions import AirflowFailException

    from quality import QualityError

    try:
        verdict = check()
    except QualityError as exc:
        log.error("%s", exc)
        raise AirflowFailException(str(exc)) from exc
    log.info("%s", verdict)
    return verdict
