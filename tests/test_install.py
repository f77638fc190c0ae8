"""Installing a part pulls only what it needs: the ingest extra resolves without Spark, Airflow, Great
Expectations or Faust, and the ingest API starts and answers with those unimportable."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.error import URLError
from urllib.parse import urlsplit

import pytest

from tally.services import free_port

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parent.parent
HEAVY_DISTRIBUTIONS = {"pyspark", "apache-airflow", "great-expectations", "faust-streaming"}
HEAVY_MODULES = ("pyspark", "airflow", "great_expectations", "faust")
REDIS_DB = 14  # no other test uses it: the API only needs a Redis address to start
# `python -m ingest` with the heavy modules made unimportable (None in sys.modules): any import of
# them, however deep, raises ImportError and the API does not start.
BLOCKED_INGEST = (
    f"import runpy, sys; sys.modules.update(dict.fromkeys({HEAVY_MODULES!r})); "
    "runpy.run_module('ingest', run_name='__main__', alter_sys=True)"
)


def _distribution(name: str) -> str:
    """A distribution name in its normalized form (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_ingest_extra_resolves_without_the_heavy_parts(tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # an empty environment: the resolution installs everything it needs
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    uv = Path(sys.executable).with_name("uv")  # the installer `make install` uses
    command = [
        str(uv),
        "pip",
        "install",
        "--dry-run",
        "--python",
        str(venv / "bin" / "python"),
        "--constraint",
        str(ROOT / "constraints.txt"),
        f"{ROOT}[ingest]",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    # "Would install N packages", then one " + name==version" (" + tally @ file://…") line each.
    installs = [line[3:] for line in done.stderr.splitlines() if line.startswith(" + ")]
    names = {_distribution(re.split(r"==| @ ", line)[0]) for line in installs}
    assert names & HEAVY_DISTRIBUTIONS == set()
    assert {"tally", "fastapi", "uvicorn", "aiokafka", "redis"} <= names


@pytest.fixture
def ingest_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    """The environment of an ingest API on a free port, a broker address nothing listens on (the API
    starts without its broker and answers 503 until it is back) and a Redis DB of its own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TALLY_")}
    env.update(
        TALLY_DATA_DIR=str(tmp_path / "data"),
        TALLY_INGEST_HOST="127.0.0.1",
        TALLY_INGEST_PORT=str(free_port()),
        TALLY_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
        TALLY_REDIS_URL=urlsplit(redis_url)._replace(path=f"/{REDIS_DB}").geturl(),
        TALLY_COLLECTOR_KEY="test-collector-key-0123456789",
        TALLY_USER_TOKEN_SECRET="test-user-token-secret-0123456789",
    )
    return env


@pytest.fixture
def blocked_ingest(tmp_path: Path, ingest_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """`python -m ingest` from this project's virtualenv, outside the checkout, heavy modules blocked."""
    process = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_INGEST],
        cwd=tmp_path,
        env=ingest_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)
        if process.stdout is not None:
            process.stdout.close()


def _health(url: str, process: subprocess.Popen[str], timeout: float = 60) -> dict[str, str]:
    """The health route's answer once the API is up; fail with its output if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            pytest.fail(f"the ingest API exited with {process.returncode}:\n{output}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                answer: dict[str, str] = json.loads(response.read())
                return answer
        except (URLError, ConnectionError):
            if time.monotonic() > deadline:
                pytest.fail(f"the ingest API did not answer {url} within {timeout:.0f} s")
            time.sleep(0.2)


def test_the_ingest_api_starts_without_the_heavy_parts(
    blocked_ingest: subprocess.Popen[str], ingest_env: dict[str, str]
) -> None:
    url = f"http://127.0.0.1:{ingest_env['TALLY_INGEST_PORT']}/healthz"

    assert _health(url, blocked_ingest) == {"status": "ok"}

    blocked_ingest.terminate()  # uvicorn shuts down, then re-raises the signal it caught
    assert blocked_ingest.wait(timeout=20) == -signal.SIGTERM
