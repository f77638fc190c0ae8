"""How an API process starts: its secrets checked first, then uvicorn serving the real app."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from counting import logs
from counting.apiprocess import ApiProcess
from counting.settings import Settings


def test_a_missing_secret_stops_the_start_naming_the_variable(settings: Settings) -> None:
    started: list[Settings] = []
    process = ApiProcess("serving", ("admin_key",), "nowhere:worker_app", started.append)
    with pytest.raises(SystemExit, match=r"the serving API refuses to start: TALLY_ADMIN_KEY is empty"):
        process.run("127.0.0.1", 1, 1, settings.model_copy(update={"admin_key": ""}))
    assert started == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("workers", [1, 2])
def test_the_serving_api_starts_with_one_or_several_workers(settings: Settings, workers: int) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "TALLY_SERVING_PORT": str(port),
        "TALLY_SERVING_WORKERS": str(workers),
        "TALLY_ADMIN_KEY": "k" * 32,
        "TALLY_REDIS_URL": settings.redis_url,
        "TALLY_DATA_DIR": str(settings.data_dir),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "serving_layer"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "the serving API did not answer within 60 s"
                time.sleep(0.2)
        assert answer.status_code == 200
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    # Whatever it logged (at level warning, usually nothing) is in the one format.
    parsed = [logs.parse(line) for line in err.splitlines() if line.strip()]
    assert all(list(p)[:5] == list(logs.LEADING_FIELDS) and p["process"] == "serving" for p in parsed), err
    # A graceful stop: the supervisor exits 0; a lone uvicorn re-raises the SIGTERM it handled.
    assert server.returncode in (0, -signal.SIGTERM)


def test_an_apps_start_up_objects_are_out_of_the_collectors_reach(settings: Settings) -> None:
    """A full pass of the cyclic collector walks every tracked object while the event loop waits
    (79-116 ms in a serving process before this); what start-up made is frozen first."""
    script = (
        "import gc; from serving_layer.__main__ import PROCESS; "
        "before = gc.get_freeze_count(); PROCESS.worker_app(); "
        "print(before, gc.get_freeze_count(), len(gc.get_objects(generation=2)))"
    )
    env = {
        **os.environ,
        "TALLY_ADMIN_KEY": "k" * 32,
        "TALLY_REDIS_URL": settings.redis_url,
        "TALLY_DATA_DIR": str(settings.data_dir),
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    before, frozen, walked = map(int, done.stdout.split())
    assert before == 0
    assert frozen > 50_000, "the imports and the app alone are that many objects"
    assert walked < frozen / 10, "what a full pass still walks"
