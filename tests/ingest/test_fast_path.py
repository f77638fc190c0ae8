"""The plain write path (`ingest.fast_path`) answers every user-route request as FastAPI's routes
do: the same status, content and headers for writes and for each refusal, against a real broker
and Redis; a request FastAPI would not route to a user route still goes to FastAPI."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from counting.event import MAX_BODY_BYTES
from counting.settings import Settings
from ingest.app import create_app
from ingest.auth import issue_token
from ingest.fast_path import PlainWrites
from tally.topics import ensure_topics

pytestmark = pytest.mark.integration

_SERVER_SET = ("event_id", "ts", "ingest_ts")  # differ between two writes of the same request


def _apps(settings: Settings) -> tuple[FastAPI, FastAPI]:
    """The ingest app, and one without the plain write path (FastAPI's routes answer)."""
    plain, routed = create_app(settings), create_app(settings)
    routed.user_middleware = [m for m in routed.user_middleware if m.cls is not PlainWrites]
    return plain, routed


def _answer(response: Any) -> tuple[int, dict[str, Any], str | None, str | None]:
    body = response.json()
    if response.status_code == 202:
        assert all(body.pop(field) for field in _SERVER_SET if field in body)
    for error in body.get("errors", []):  # a rate limit's wait, in ms, moves between two requests
        error["reason"] = re.sub(r"retry after \d+ ms", "retry after N ms", error["reason"])
    return (
        response.status_code,
        body,
        response.headers.get("content-type"),
        response.headers.get("retry-after"),
    )


@pytest.fixture
def ingest_settings(settings: Settings, broker: str, redis_client: redis.Redis) -> Settings:
    configured = settings.model_copy(update={"kafka_bootstrap": broker, "rate_limit_user_per_min": 9})
    ensure_topics(configured)
    return configured


def test_each_user_route_request_is_answered_as_fastapis_route_answers_it(
    ingest_settings: Settings, redis_client: redis.Redis
) -> None:
    token = issue_token(ingest_settings.user_token_secret, "u1", 600)
    signed = {"authorization": f"Bearer {token}"}
    now = time.time_ns() // 1_000_000
    too_long = {**signed, "content-length": str(MAX_BODY_BYTES + 1)}
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/videos/abc/like", {"headers": signed}),
        ("DELETE", "/v1/videos/abc/like", {"headers": signed, "json": {"event_id": "e-1", "ts": now}}),
        ("POST", "/v1/videos/abc/view", {"headers": signed, "json": {"session_id": "s", "watch_secs": 40}}),
        ("POST", "/v1/videos/abc/like", {}),  # no token
        ("POST", "/v1/videos/abc/like", {"headers": {"authorization": "Bearer v1.x.1.y"}}),
        ("POST", "/v1/videos/bad;id/like", {"headers": signed}),
        ("POST", "/v1/videos/abc/like", {"headers": signed, "json": {"ip": "1.2.3.4"}}),
        (
            "POST",
            "/v1/videos/abc/like",
            {"headers": {**signed, "content-type": "application/json"}, "content": b"{"},
        ),
        ("POST", "/v1/videos/abc/like", {"headers": signed, "content": b"[1]"}),
        ("POST", "/v1/videos/abc/like", {"headers": too_long}),
        ("GET", "/v1/videos/abc/like", {"headers": signed}),  # no such method: FastAPI's 405
        ("POST", "/v1/videos/a/b/like", {"headers": signed}),  # no such path: FastAPI's 404
        ("POST", "/v1/videos/abc/like", {"headers": signed}),  # the user's 9th admitted in the minute
        ("POST", "/v1/videos/abc/like", {"headers": signed}),  # the 10th: 429 with Retry-After
    ]
    plain, routed = _apps(ingest_settings)
    answers = []
    for app in (plain, routed):
        redis_client.flushdb()  # the rate limits start over
        with TestClient(app, client=("203.0.113.7", 40_000)) as client:
            answers.append([_answer(client.request(method, path, **kw)) for method, path, kw in requests])
    assert answers[0] == answers[1]
    statuses = [status for status, *_ in answers[0]]
    assert statuses == [202, 202, 202, 401, 401, 422, 422, 422, 422, 413, 405, 404, 202, 429]
    assert answers[0][-1][3] is not None  # Retry-After
