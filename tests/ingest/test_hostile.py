"""Hostile bodies get a 4xx naming the problem, and the valid events beside them are kept."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from counting.settings import Settings
from ingest.app import create_app
from tally.topics import ensure_topics

pytestmark = pytest.mark.integration


@pytest.fixture
def collector(settings: Settings, broker: str) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"kafka_bootstrap": broker})
    ensure_topics(configured)
    headers = {"x-collector-key": configured.collector_key, "content-type": "application/json"}
    with TestClient(create_app(configured), headers=headers) as client:
        yield client


def _view(**overrides: object) -> dict[str, object]:
    event: dict[str, object] = {
        "event_id": "e1",
        "type": "view",
        "video_id": "v1",
        "ts": time.time_ns() // 1_000_000,
        "session_id": "s1",
        "watch_secs": 40,
    }
    event.update(overrides)
    return event


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 422, "body"),  # deeply nested
        (b'{"events": [\xff\xfe]}', 422, "body"),  # invalid UTF-8
        (b'{"events": "not a list"}', 422, "events"),
        (b"", 422, "body"),
        (b"null", 422, "body"),
    ],
)
def test_malformed_bodies_are_refused_naming_the_problem(
    collector: TestClient, body: bytes, status: int, field: str
) -> None:
    answer = collector.post("/v1/events", content=body)
    assert answer.status_code == status
    assert answer.json()["errors"][0]["field"] == field
    assert answer.json()["accepted"] == 0


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"ts": 10**30}, "ts"),
        ({"ts": -1}, "ts"),
        ({"watch_secs": 1e300}, "watch_secs"),
        ({"watch_secs": -0.5}, "watch_secs"),
        ({"event_id": "x" * 10_000}, "event_id"),
        ({"video_id": "v" * 65}, "video_id"),
        ({"user_agent": "A" * 513}, "user_agent"),
        ({"ip": "999.1.1.1"}, "ip"),
        ({"type": "purchase"}, "type"),
        ({"watch_secs": "forty"}, "watch_secs"),
        ({"session_id": {"nested": {"deeper": [1, 2, 3]}}}, "session_id"),
    ],
)
def test_absurd_values_are_refused_and_the_valid_events_kept(
    collector: TestClient, bad: dict[str, object], field: str
) -> None:
    answer = collector.post("/v1/events", json={"events": [_view(event_id="good"), _view(**bad)]})
    assert answer.status_code == 422
    assert answer.json()["accepted"] == 1
    assert [(e["index"], e["field"]) for e in answer.json()["errors"]] == [(1, field)]
