"""The ingest API against a real broker: per-event errors, stamping, packing, acknowledged writes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from fastapi.testclient import TestClient

from counting import keys
from counting.event import Event
from counting.settings import Settings
from counting.wire import decode_events
from ingest.app import create_app
from ingest.auth import issue_token
from tally.topics import ensure_topics

pytestmark = pytest.mark.integration


def _now() -> int:
    return time.time_ns() // 1_000_000


def _view(event_id: str, video_id: str = "v1") -> dict[str, object]:
    return {
        "event_id": event_id,
        "type": "view",
        "video_id": video_id,
        "ts": _now(),
        "session_id": "s1",
        "watch_secs": 45,
    }


@pytest.fixture
def ingest_settings(settings: Settings, broker: str) -> Settings:
    configured = settings.model_copy(update={"kafka_bootstrap": broker})
    ensure_topics(configured)
    return configured


@pytest.fixture
def client(ingest_settings: Settings) -> Iterator[TestClient]:
    """A trusted collector: its requests carry the collector key."""
    headers = {"x-collector-key": ingest_settings.collector_key}
    with TestClient(create_app(ingest_settings), headers=headers) as test_client:
        yield test_client


def _as_user(settings: Settings, user_id: str) -> dict[str, str]:
    return {"authorization": f"Bearer {issue_token(settings.user_token_secret, user_id, 600)}"}


def _read_topic(settings: Settings, expected: int, timeout: float = 15.0) -> list[Event]:
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(settings.events_topic, p, 0) for p in range(settings.topic_partitions)])
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(events) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            events.extend(decode_events(message.value()))
    consumer.close()
    return events


def test_batch_accepts_valid_events_and_names_each_bad_one(
    client: TestClient, ingest_settings: Settings
) -> None:
    bad_video = {**_view("e3"), "video_id": "no spaces"}
    unknown = {**_view("e4"), "color": "red"}
    body = {"events": [_view("e1", "v1"), _view("e2", "v2"), bad_video, unknown, _view("e5", "v3")]}

    response = client.post("/v1/events", json=body)

    assert response.status_code == 422
    answer = response.json()
    assert answer["accepted"] == 3
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(2, "video_id"), (3, "color")]
    written = _read_topic(ingest_settings, 3)
    assert sorted(e.event_id for e in written) == ["e1", "e2", "e5"]
    assert all(e.ingest_ts is not None and abs(e.ingest_ts - _now()) < 60_000 for e in written)


def test_all_valid_batch_is_202(client: TestClient, ingest_settings: Settings) -> None:
    response = client.post("/v1/events", json={"events": [_view(f"ok{i}", f"v{i}") for i in range(20)]})
    assert response.status_code == 202
    answer = response.json()
    assert (answer["accepted"], answer["errors"], answer["warnings"]) == (20, [], [])
    assert abs(answer["ingest_ts"] - _now()) < 60_000
    assert len(_read_topic(ingest_settings, 20)) == 20


def test_single_like_route_sets_type_video_and_user(client: TestClient, ingest_settings: Settings) -> None:
    user = _as_user(ingest_settings, "u1")
    response = client.post("/v1/videos/abc/like", json={"event_id": "l1", "ts": _now()}, headers=user)
    assert response.status_code == 202
    response = client.request(
        "DELETE", "/v1/videos/abc/like", json={"event_id": "l2", "ts": _now()}, headers=user
    )
    assert response.status_code == 202
    written = _read_topic(ingest_settings, 2)
    assert sorted((e.event_id, e.type, e.video_id, e.user_id) for e in written) == [
        ("l1", "like", "abc", "u1"),
        ("l2", "unlike", "abc", "u1"),
    ]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/videos/abc/like", {"event_id": "x", "ts": 1, "user_id": "someone-else"}, "user_id"),
        ("/v1/videos/abc/view", {"event_id": "x", "ts": 0, "session_id": "s"}, "ts"),
        ("/v1/videos/abc/view", {"event_id": "x", "type": "like"}, "type"),
        ("/v1/videos/a%20b/heartbeat", {"event_id": "x", "session_id": "s"}, "video_id"),
    ],
)
def test_single_routes_refuse_with_the_field(
    client: TestClient, ingest_settings: Settings, path: str, body: dict[str, object], field: str
) -> None:
    if field == "user_id":
        body = {**body, "ts": _now()}
    response = client.post(path, json=body, headers=_as_user(ingest_settings, "u1"))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == field


def test_malformed_and_oversized_bodies(client: TestClient) -> None:
    response = client.post("/v1/events", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "body"
    huge = b'{"events": [' + b" " * (5 * 1024 * 1024) + b"]}"
    response = client.post("/v1/events", content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["errors"][0]["field"] == "body"


def test_acknowledged_reactions_are_recorded_latest_wins(
    client: TestClient, ingest_settings: Settings, redis_client: redis.Redis
) -> None:
    now = _now()
    user = _as_user(ingest_settings, "u9")
    like = {"event_id": "r2", "ts": now}
    older_unlike = {"event_id": "r1", "ts": now - 1_000}
    assert client.post("/v1/videos/clip/like", json=like, headers=user).status_code == 202
    assert (
        client.request("DELETE", "/v1/videos/clip/like", json=older_unlike, headers=user).status_code == 202
    )

    assert redis_client.hget(keys.user_reactions("clip"), "u9") == f"{now}|r2|liked".encode()

    newer_unlike = {"event_id": "r3", "ts": now + 1}
    assert (
        client.request("DELETE", "/v1/videos/clip/like", json=newer_unlike, headers=user).status_code == 202
    )
    assert redis_client.hget(keys.user_reactions("clip"), "u9") == f"{now + 1}|r3|none".encode()


def test_batch_route_needs_the_collector_key(ingest_settings: Settings) -> None:
    with TestClient(create_app(ingest_settings)) as anonymous:
        answer = anonymous.post("/v1/events", json={"events": [_view("k1")]})
        assert (answer.status_code, answer.json()["errors"][0]["field"]) == (401, "x-collector-key")
        wrong = anonymous.post(
            "/v1/events", json={"events": [_view("k1")]}, headers={"x-collector-key": "no"}
        )
        assert wrong.status_code == 401


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Basic abc",
        "Bearer nonsense",
        "Bearer v1.dTE.99999999999.forged",
        # A signature with bytes outside ASCII (once a 500: compare_digest refuses non-ASCII text).
        b"Bearer v1.YWxpY2U.1795806414.\xc3\xa9",
        b"Bearer v1.YWxpY2U.1795806414.\xff",
    ],
)
def test_user_routes_need_a_valid_token(client: TestClient, authorization: str | bytes | None) -> None:
    headers = {"authorization": authorization} if authorization else {}
    answer = client.post("/v1/videos/abc/like", json={"event_id": "t", "ts": _now()}, headers=headers)
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (401, "authorization")


def test_expired_token_is_refused(client: TestClient, ingest_settings: Settings) -> None:
    token = issue_token(ingest_settings.user_token_secret, "u1", 60, now=1_000.0)
    answer = client.post(
        "/v1/videos/abc/like",
        json={"event_id": "t", "ts": _now()},
        headers={"authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 401
    assert "expired" in answer.json()["errors"][0]["reason"]


def test_per_user_rate_limit_answers_429_with_retry_after(ingest_settings: Settings) -> None:
    limited = ingest_settings.model_copy(update={"rate_limit_user_per_min": 3})
    user = _as_user(limited, "busy")
    with TestClient(create_app(limited)) as client:
        statuses = [
            client.post(
                "/v1/videos/abc/heartbeat",
                json={"event_id": f"h{i}", "ts": _now(), "session_id": "s"},
                headers=user,
            ).status_code
            for i in range(5)
        ]
        assert statuses == [202, 202, 202, 429, 429]
        answer = client.post(
            "/v1/videos/abc/heartbeat", json={"event_id": "h9", "ts": _now(), "session_id": "s"}, headers=user
        )
        assert 1 <= int(answer.headers["retry-after"]) <= 60
        assert answer.json()["errors"][0]["field"] == "user"
        other = client.post(
            "/v1/videos/abc/heartbeat",
            json={"event_id": "o1", "ts": _now(), "session_id": "s"},
            headers=_as_user(limited, "calm"),
        )
        assert other.status_code == 202
