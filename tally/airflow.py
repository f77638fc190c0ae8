"""`tally airflow`: Airflow on this machine (standalone: API server and UI, scheduler, DAG processor,
triggerer) with the project's DAGs and a metadata database under the data directory, or in
PostgreSQL with the LocalExecutor (`--db`, `--executor`: the shape production runs)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from counting.settings import Settings
from tally.errors import StackError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

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
# `tally airflow --executor NAME` (or TALLY_AIRFLOW_EXECUTOR): the executors that run on one machine.
EXECUTORS = {"local": "LocalExecutor"}
DB_OPTION = "--db / TALLY_AIRFLOW_DB_URL"
EXECUTOR_OPTION = "--executor / TALLY_AIRFLOW_EXECUTOR"
DB_EXAMPLE = "postgresql+psycopg://user:password@host:5432/airflow"
# How long the metadata database may take to accept a connection before `tally airflow` gives up.
CONNECT_TIMEOUT_SECONDS = 5

T = TypeVar("T")
log = logging.getLogger(__name__)


def machine_cores() -> int:
    """The cores this process may run on (what the LocalExecutor's parallelism is sized to: every
    task runs local Spark, which would share them anyway)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def airflow_env(
    settings: Settings, port: int = DEFAULT_PORT, db_url: str | None = None, executor: str | None = None
) -> dict[str, str]:
    """The environment Airflow runs with: its home under the data directory, the project's DAGs
    folder, no examples, the UI and API on 127.0.0.1:`port`, and the settings as TALLY_* variables
    (so every task reads the same data directory, Redis and bucket width); with `db_url` and
    `executor`, the metadata database and executor too (see `metadata_env`)."""
    from counting.settings import settings_env

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
        **metadata_env(db_url, executor),
    }


def metadata_env(db_url: str | None, executor: str | None) -> dict[str, str]:
    """The AIRFLOW__ variables of a metadata database in PostgreSQL (`db_url`; None: Airflow's SQLite
    file under AIRFLOW_HOME) and of an executor by its short name (None: Airflow's default, the
    LocalExecutor). The async URL is set too: Airflow would derive one for asyncpg, which is not
    installed; psycopg 3 serves both."""
    env: dict[str, str] = {}
    if db_url is not None:
        url = metadata_url(db_url)
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = url.render_as_string(hide_password=False)
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = url.set(
            drivername="postgresql+psycopg_async"
        ).render_as_string(hide_password=False)
    if executor is not None:
        env["AIRFLOW__CORE__EXECUTOR"] = executor_class(executor)
    return env


def executor_class(name: str) -> str:
    """The Airflow executor of a short name (`local` → LocalExecutor)."""
    try:
        return EXECUTORS[name.strip().lower()]
    except KeyError:
        raise StackError(
            f"{EXECUTOR_OPTION} must be one of {', '.join(EXECUTORS)} (got {name!r}); a fleet's "
            "CeleryExecutor or KubernetesExecutor is set with AIRFLOW__CORE__EXECUTOR (see the "
            "docs/airflow.md, 'Airflow like production')"
        ) from None


def metadata_url(db_url: str) -> URL:
    """The SQLAlchemy URL of a PostgreSQL metadata database, with the installed driver (psycopg 3)."""
    import sqlalchemy as sa

    try:
        url = sa.make_url(db_url)
    except (sa.exc.ArgumentError, ValueError):
        raise StackError(
            f"{DB_OPTION} is not a database URL (got {hide_password(db_url)!r}): give one like {DB_EXAMPLE}"
        ) from None
    if url.get_backend_name() != "postgresql" or url.get_driver_name() != "psycopg":
        raise StackError(
            f"{DB_OPTION} must be a PostgreSQL URL for psycopg 3, the driver installed (got "
            f"{url.render_as_string(hide_password=True)!r}): give one like {DB_EXAMPLE}"
        )
    if not url.database:
        raise StackError(
            f"{DB_OPTION} names no database (got {url.render_as_string(hide_password=True)!r}): "
            f"give one like {DB_EXAMPLE}"
        )
    return url.set(drivername="postgresql+psycopg")


def hide_password(text: str) -> str:
    """A URL-like text with the password between `user:` and `@` replaced by ***."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", text)


def database_address(url: URL) -> str:
    """host:port/database of a PostgreSQL URL (libpq's defaults filled in)."""
    return f"{url.host or 'localhost'}:{url.port or 5432}/{url.database}"


def check_metadata_db(db_url: str, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """Connect once to the metadata database, giving up after `timeout` seconds: a wrong URL, a
    server down or a database not created fails here, naming what to do, rather than deep in
    `airflow db migrate` or in a component that retries."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    url = metadata_url(db_url)
    seconds = max(1, round(timeout))  # libpq takes whole seconds
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": seconds})
    try:
        with engine.connect():
            return
    except sa.exc.DBAPIError as exc:
        reason = "; ".join(line.strip() for line in str(exc.orig).splitlines() if line.strip())
        raise StackError(
            f"Airflow's metadata database is not reachable at {database_address(url)} (from {DB_OPTION}: "
            f"{url.render_as_string(hide_password=True)}, {seconds} s timeout): start PostgreSQL "
            f"there and create the database (createdb -h {url.host or 'localhost'} -p "
            f"{url.port or 5432} -U {url.username or 'postgres'} {url.database}), or fix the URL; "
            f"psycopg said: {hide_password(reason) or type(exc.orig).__name__}"
        ) from None
    finally:
        engine.dispose()


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


def login_help(
    settings: Settings, port: int = DEFAULT_PORT, db_url: str | None = None, executor: str | None = None
) -> str:
    metadata = (
        metadata_url(db_url).render_as_string(hide_password=True)
        if db_url is not None
        else f"SQLite under {settings.airflow_home.resolve()}"
    )
    runs_on = executor_class(executor) if executor is not None else "Airflow's default (LocalExecutor)"
    return (
        f"Airflow UI: http://127.0.0.1:{port}/  (user '{ADMIN}'; the password is generated on the\n"
        f"first start and kept in {passwords_file(settings)}, e.g.\n"
        f"  python -c \"import json; print(json.load(open('{passwords_file(settings)}'))['{ADMIN}'])\")\n"
        f"metadata database: {metadata}; executor: {runs_on}"
    )


def migrate_metadata(settings: Settings, env: Mapping[str, str]) -> None:
    """`airflow db migrate`: create or upgrade the metadata database (under the data directory, or
    the one `env` points at)."""
    settings.airflow_home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [airflow_command(), "db", "migrate"], env={**os.environ, **env}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise StackError(f"'airflow db migrate' failed ({done.returncode}): {done.stderr[-2000:]}")


def run_airflow(
    settings: Settings, port: int = DEFAULT_PORT, db_url: str | None = None, executor: str | None = None
) -> int:
    """Migrate the metadata database, then run `airflow standalone` in the foreground until Ctrl-C
    (or SIGTERM), which stops every component it started (see `stop_standalone`).

    With `db_url` the metadata lives in that PostgreSQL database, checked first with a short
    timeout; `executor` names the executor (`local`). Standalone keeps both (it forces only an
    executor that does not run on this machine, and the simple auth manager).

    Standalone runs in a session of its own, so the terminal's Ctrl-C reaches only this process,
    which then stops it in order, instead of every component and running task at once."""
    env = airflow_env(settings, port, db_url, executor)
    if db_url is not None:
        check_metadata_db(db_url)
    migrate_metadata(settings, env)
    print(login_help(settings, port, db_url, executor), flush=True)
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
