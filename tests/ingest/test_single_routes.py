"""The single-event routes against a real broker: address and user agent from the connection (proxies
only when trusted), event id and time supplied by the server when the body leaves them out."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from fastapi.testclient import TestClient

from counting.event import Event
from counting.settings import Settings
from counting.wire import decode_events
from ingest.app import create_app
from ingest.auth import issue_token
from ingest.routes import SINGLE_ROUTES
from tally.services import free_port, wait_for_port
from tally.stack import settings_env
from tally.topics import ensure_topics

pytestmark = pytest.mark.integration


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def ingest_settings(settings: Settings, broker: str, redis_client: redis.Redis) -> Settings:
    configured = settings.model_copy(
        update={"kafka_bootstrap": broker, "trusted_proxies": ["10.0.0.0/8", "fd00::/8"]}
    )
    ensure_topics(configured)
    return configured


def _client(settings: Settings, peer: str) -> TestClient:
    """A client whose connection comes from `peer`, signed in as user u1."""
    token = issue_token(settings.user_token_secret, "u1", 600)
    return TestClient(
        create_app(settings), client=(peer, 40_000), headers={"authorization": f"Bearer {token}"}
    )


@pytest.fixture
def from_outside(ingest_settings: Settings) -> Iterator[TestClient]:
    """A browser connecting directly from an address that is no trusted proxy."""
    with _client(ingest_settings, "203.0.113.7") as client:
        yield client


def _written(settings: Settings, expected: int, timeout: float = 15.0) -> list[Event]:
    """The events that reached the broker's topic."""
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


@pytest.mark.parametrize(("field", "value"), [("ip", "198.51.100.1"), ("user_agent", "Mozilla/5.0")])
def test_body_address_or_agent_is_refused_naming_the_field(
    from_outside: TestClient, field: str, value: str
) -> None:
    answer = from_outside.post("/v1/videos/abc/like", json={"event_id": "b1", "ts": _now(), field: value})

    assert answer.status_code == 422
    assert answer.json()["errors"] == [
        {"field": field, "reason": "set from the connection; leave it out of the body"}
    ]


def test_event_carries_the_connection_address_and_user_agent(
    from_outside: TestClient, ingest_settings: Settings
) -> None:
    headers = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "x-forwarded-for": "192.0.2.1"}

    answer = from_outside.post(
        "/v1/videos/abc/view",
        json={"event_id": "c1", "ts": _now(), "session_id": "s1", "watch_secs": 40},
        headers=headers,
    )

    assert answer.status_code == 202, answer.text
    [event] = _written(ingest_settings, 1)
    assert (event.event_id, event.ip, event.user_agent) == (
        "c1",
        "203.0.113.7",  # the peer: its X-Forwarded-For is not believed
        "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0",
    )


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client_ip"),
    [
        ("10.0.0.5", "198.51.100.9", "198.51.100.9"),
        ("10.0.0.5", "192.0.2.66, 198.51.100.9, 10.1.2.3", "198.51.100.9"),  # right-most untrusted hop
        ("::ffff:10.0.0.5", "2001:db8::7", "2001:db8::7"),
        ("fd00::1", "not-an-address, 10.9.9.9", "10.9.9.9"),  # a broken chain stops at the proxy
    ],
)
def test_forwarded_for_is_believed_from_a_trusted_proxy(
    ingest_settings: Settings, peer: str, forwarded_for: str, client_ip: str
) -> None:
    with _client(ingest_settings, peer) as proxy:
        answer = proxy.post(
            "/v1/videos/abc/like",
            json={"event_id": "p1", "ts": _now()},
            headers={"x-forwarded-for": forwarded_for},
        )

    assert answer.status_code == 202, answer.text
    assert [e.ip for e in _written(ingest_settings, 1)] == [client_ip]


def test_the_address_rate_limit_counts_each_client_behind_a_trusted_proxy(ingest_settings: Settings) -> None:
    limited = ingest_settings.model_copy(update={"rate_limit_ip_per_min": 2})
    with _client(limited, "10.0.0.5") as proxy:

        def like(client_ip: str, user: str) -> int:
            token = issue_token(limited.user_token_secret, user, 600)
            headers = {"x-forwarded-for": client_ip, "authorization": f"Bearer {token}"}
            return proxy.post("/v1/videos/abc/like", json={}, headers=headers).status_code

        first = [like("198.51.100.20", f"a{i}") for i in range(3)]
        other = like("198.51.100.21", "b0")

    assert (first, other) == ([202, 202, 429], 202)


def test_like_without_event_id_and_ts_gets_the_servers(
    from_outside: TestClient, ingest_settings: Settings
) -> None:
    before = _now()
    first = from_outside.post("/v1/videos/abc/like")
    second = from_outside.request("DELETE", "/v1/videos/abc/like", json={})
    after = _now()

    assert (first.status_code, second.status_code) == (202, 202), (first.text, second.text)
    answers = [first.json(), second.json()]
    written = {e.event_id: e for e in _written(ingest_settings, 2)}
    assert sorted(written) == sorted(a["event_id"] for a in answers)
    assert answers[0]["event_id"] != answers[1]["event_id"]
    for answer in answers:
        event = written[answer["event_id"]]
        assert before <= event.ts == answer["ts"] <= after
        assert event.ingest_ts is not None and before <= event.ingest_ts <= after


def test_a_client_retry_with_the_answered_event_id_keeps_it(
    from_outside: TestClient, ingest_settings: Settings
) -> None:
    first = from_outside.post("/v1/videos/abc/like").json()
    retry = from_outside.post("/v1/videos/abc/like", json={"event_id": first["event_id"], "ts": first["ts"]})

    assert retry.status_code == 202
    assert (retry.json()["event_id"], retry.json()["ts"]) == (first["event_id"], first["ts"])
    written = _written(ingest_settings, 2)
    assert [(e.event_id, e.ts) for e in written] == [(first["event_id"], first["ts"])] * 2


def test_the_batch_route_still_needs_event_id_and_ts(ingest_settings: Settings) -> None:
    headers = {"x-collector-key": ingest_settings.collector_key}
    event = {"type": "like", "video_id": "abc", "user_id": "u1"}
    with TestClient(create_app(ingest_settings), headers=headers) as collector:
        answer = collector.post(
            "/v1/events", json={"events": [{**event, "ts": _now()}, {**event, "event_id": "x"}]}
        )
        single = collector.post("/v1/videos/abc/like", headers=_signed(ingest_settings))

    assert answer.status_code == 422
    assert [(e["index"], e["field"]) for e in answer.json()["errors"]] == [(0, "event_id"), (1, "ts")]
    assert single.status_code == 202, single.text


def _signed(settings: Settings) -> dict[str, str]:
    return {"authorization": f"Bearer {issue_token(settings.user_token_secret, 'u1', 600)}"}


def test_openapi_single_body_leaves_out_what_the_server_sets(from_outside: TestClient) -> None:
    spec = from_outside.get("/openapi.json").json()
    like = spec["paths"]["/v1/videos/{video_id}/like"]["post"]
    body = like["requestBody"]["content"]["application/json"]["schema"]
    batch = spec["paths"]["/v1/events"]["post"]["requestBody"]["content"]["application/json"]["schema"]

    server_set = {"ip", "user_agent", "type", "video_id", "user_id", "ingest_ts", "region"}
    assert not server_set & set(body["properties"])
    assert not {"ingest_ts", "region"} & set(batch["properties"]["events"]["items"]["properties"])
    assert {"event_id", "ts"} <= set(body["properties"])
    assert not {"event_id", "ts"} & set(body["required"])
    assert like["requestBody"].get("required", False) is False
    assert "supplies a fresh id" in like["description"]
    assert {"event_id", "ts"} <= set(batch["properties"]["events"]["items"]["required"])


def test_openapi_of_each_single_route_says_what_its_event_requires(from_outside: TestClient) -> None:
    """A view, a heartbeat and a leave need `session_id` (a body without it is 422), so their body is
    required; `watch_secs` is offered on a view only (elsewhere it is refused)."""
    paths = from_outside.get("/openapi.json").json()["paths"]
    bodies = {
        event_type: paths[path][method.lower()]["requestBody"] for method, path, event_type in SINGLE_ROUTES
    }

    def required(event_type: str) -> tuple[bool, list[str]]:
        body = bodies[event_type]
        return body.get("required", False), body["content"]["application/json"]["schema"]["required"]

    assert {t: required(t) for t in bodies} == {
        "view": (True, ["session_id"]),
        "like": (False, []),
        "unlike": (False, []),
        "dislike": (False, []),
        "undislike": (False, []),
        "heartbeat": (True, ["session_id"]),
        "leave": (True, ["session_id"]),
    }
    schemas = {t: body["content"]["application/json"]["schema"] for t, body in bodies.items()}
    offered = {t for t, schema in schemas.items() if "watch_secs" in schema["properties"]}
    assert offered == {"view"}
    refused = from_outside.post("/v1/videos/abc/view", json={"watch_secs": 40})
    assert (refused.status_code, refused.json()["errors"][0]["field"]) == (422, "session_id")


def test_copies_of_an_event_in_one_batch_are_written_once_and_named(
    ingest_settings: Settings,
) -> None:
    """A client that retries by resending its buffer: the copy is left out (the log never holds one
    event twice at one Kafka position, which the raw gate refuses as corruption) and the answer
    names it; a copy sent again in a later request is written (the counters count it once)."""
    now = _now()
    view = {
        "event_id": "r1",
        "type": "view",
        "video_id": "abc",
        "ts": now,
        "session_id": "s",
        "watch_secs": 40,
    }
    like = {"event_id": "r2", "type": "like", "video_id": "abc", "ts": now, "user_id": "u1"}
    headers = {"x-collector-key": ingest_settings.collector_key}
    with TestClient(create_app(ingest_settings)) as collector:
        first = collector.post(
            "/v1/events", json={"events": [view, like, {"oops": 1}, view]}, headers=headers
        )
        again = collector.post("/v1/events", json={"events": [like]}, headers=headers)

    assert first.status_code == 422, first.text  # the malformed event; the others are written
    answer = first.json()
    assert answer["accepted"] == 2
    assert answer["warnings"] == [
        "events[3]: event_id 'r1' repeats events[0]; a retry inside one request is written and counted once"
    ]
    assert again.status_code == 202 and again.json()["accepted"] == 1
    assert sorted(e.event_id for e in _written(ingest_settings, 3)) == ["r1", "r2", "r2"]


def test_the_ingest_process_believes_forwarded_for_only_from_a_trusted_proxy(
    ingest_settings: Settings,
) -> None:
    """`python -m ingest` as the stack runs it: a loopback peer is no trusted proxy here, so its
    X-Forwarded-For is ignored (uvicorn's own proxy handling would have believed it)."""
    port = free_port()
    env = {**settings_env(ingest_settings), "TALLY_INGEST_PORT": str(port)}
    server = subprocess.Popen([sys.executable, "-m", "ingest"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, 60, "the ingest API", alive=lambda: server.poll() is None)
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/videos/abc/view",
            json={"event_id": "x1", "ts": _now(), "session_id": "s1", "watch_secs": 40},
            headers={**_signed(ingest_settings), "x-forwarded-for": "203.0.113.9"},
            timeout=10,
        )
    finally:
        server.terminate()
        server.communicate(timeout=30)

    assert answer.status_code == 202, answer.text
    assert [(e.event_id, e.ip) for e in _written(ingest_settings, 1)] == [("x1", "127.0.0.1")]
