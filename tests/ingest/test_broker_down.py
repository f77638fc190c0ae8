"""The broker stops: the ingest API answers 503 within the delivery timeout, acknowledges nothing
it did not write, and writes again by itself once a broker is back on the same address."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from counting.settings import Settings
from ingest.app import create_app
from tally.services import free_port, start_broker
from tally.topics import ensure_topics

# serial: the refusals are timed against the delivery timeout: alone on the machine.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]


def _batch(prefix: str, size: int = 5) -> dict[str, object]:
    now = time.time_ns() // 1_000_000
    return {
        "events": [
            {
                "event_id": f"{prefix}-{i}",
                "type": "view",
                "video_id": f"v{i}",
                "ts": now,
                "session_id": "s",
                "watch_secs": 40,
            }
            for i in range(size)
        ]
    }


def test_broker_stop_gives_fast_503_and_recovery(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    configured = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{port}"})
    headers = {"x-collector-key": configured.collector_key}

    with TestClient(create_app(configured), headers=headers) as client:
        down = client.post("/v1/events", json=_batch("before"))
        assert (down.status_code, down.json()["accepted"]) == (503, 0), "no broker yet: nothing acknowledged"

        broker = start_broker(port, tmp_path / "b1")
        ensure_topics(configured)
        deadline = time.monotonic() + 30
        while (answer := client.post("/v1/events", json=_batch("up"))).status_code != 202:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.5)
        assert answer.json()["accepted"] == 5

        broker.stop()
        started = time.monotonic()
        stopped = client.post("/v1/events", json=_batch("stopped"))
        took = time.monotonic() - started
        assert (stopped.status_code, stopped.json()["accepted"]) == (503, 0)
        assert took < configured.delivery_timeout_ms / 1000 + 5
        assert stopped.json()["errors"][0]["field"] == "broker"

        broker = start_broker(port, tmp_path / "b2")
        ensure_topics(configured)
        deadline = time.monotonic() + 60
        while (answer := client.post("/v1/events", json=_batch("again"))).status_code != 202:
            assert answer.status_code == 503, answer.text
            assert time.monotonic() < deadline, "the API did not recover once the broker was back"
            time.sleep(0.5)
        assert answer.json()["accepted"] == 5
        broker.stop()


def test_paused_broker_refuses_concurrent_requests_within_one_delivery_timeout(
    settings: Settings, tmp_path: Path
) -> None:
    """A broker that stops answering (SIGSTOP) while several requests wait: each is refused within
    the delivery timeout (one deadline covers the lock, the buffer and the acknowledgements), and the
    API acknowledges again once the broker resumes."""
    port = free_port()
    configured = settings.model_copy(
        update={"kafka_bootstrap": f"127.0.0.1:{port}", "delivery_timeout_ms": 2_000}
    )
    headers = {"x-collector-key": configured.collector_key}
    broker = start_broker(port, tmp_path / "b")
    try:
        ensure_topics(configured)
        with TestClient(create_app(configured), headers=headers) as client:
            deadline = time.monotonic() + 30
            while (answer := client.post("/v1/events", json=_batch("up"))).status_code != 202:
                assert time.monotonic() < deadline, answer.text
                time.sleep(0.5)

            broker.process.send_signal(signal.SIGSTOP)
            try:
                paused_until = time.monotonic() + 3 * configured.delivery_timeout_ms / 1000

                def post(i: int) -> list[tuple[int, int, float]]:
                    answers = []
                    while time.monotonic() < paused_until:
                        started = time.monotonic()
                        answer = client.post("/v1/events", json=_batch(f"paused-{i}-{len(answers)}", 200))
                        answers.append(
                            (answer.status_code, answer.json()["accepted"], time.monotonic() - started)
                        )
                    return answers

                with ThreadPoolExecutor(8) as pool:
                    answers = [a for each in pool.map(post, range(8)) for a in each]
            finally:
                broker.process.send_signal(signal.SIGCONT)
            limit = configured.delivery_timeout_ms / 1000 + 1.0
            assert {(status, accepted) for status, accepted, _ in answers} == {(503, 0)}
            assert max(took for _, _, took in answers) < limit, sorted(took for _, _, took in answers)

            deadline = time.monotonic() + 30
            while (answer := client.post("/v1/events", json=_batch("resumed"))).status_code != 202:
                assert time.monotonic() < deadline, "the API did not recover once the broker resumed"
                time.sleep(0.2)
            assert answer.json()["accepted"] == 5
    finally:
        broker.stop()
