"""`tally airflow`: Airflow on this machine (standalone: API server and UI, scheduler, DAG processor,
triggerer) with the project's DAGs and a metadata database under the data directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
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

T = TypeVar("T")


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
    (or SIGTERM), which stops every component it started."""
    env = airflow_env(settings, port)
    migrate_metadata(settings, env)
    print(login_help(settings, port), flush=True)
    process = subprocess.Popen([airflow_command(), "standalone"], env={**os.environ, **env})
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        return stop_standalone(process)
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_standalone(process: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """Stop `airflow standalone` the way it expects: SIGINT, upon which it stops its components
    (SIGTERM would orphan them). Killed if it has not finished after `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def gate(check: Callable[[], T]) -> T:
    """Run a data-quality gate in an Airflow task: a failed validation fails the task at once,
    without retries (the data will not get better by waiting); other errors retry as usual."""
    from airflow.sdk.exceptions import AirflowFailException

    from quality import ValidationFailed

    try:
        return check()
    except ValidationFailed as exc:
        raise AirflowFailException(str(exc)) from exc
