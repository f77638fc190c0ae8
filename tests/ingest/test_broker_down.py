"""The broker stops: the ingest API answers 503 within the delivery timeout, acknowledges nothing
it did not write, and writes again by itself once a broker is back on the same address."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from counting.settings import Settings
from ingest.app import create_app
from tally.services import free_port, start_broker
from tally.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _batch(prefix: str) -> dict[str, object]:
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
            for i in range(5)
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
