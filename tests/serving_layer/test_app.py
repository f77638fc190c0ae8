"""The stats route against a real Redis and a published baseline: the merge at the cutoff."""

from __future__ import annotations

import time

import pytest
import redis
from fastapi.testclient import TestClient

from counting import keys
from counting.settings import Settings
from serving_layer.app import create_app
from tally.services import free_port
from tests.serving_layer.conftest import bucket_now, publish, put_speed
from warehouse.baseline import BaselineRow

pytestmark = pytest.mark.integration


def test_served_is_baseline_plus_speed_buckets_from_the_cutoff(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    cutoff = b * settings.bucket_ms
    publish(settings, "r1", cutoff, [BaselineRow("v1", views=100, likes=7, unique_viewers=40)])
    put_speed(redis_client, "v1", b - 1, views=55, likes=3, uniques=20)  # before the cutoff: in the baseline
    put_speed(redis_client, "v1", b, views=5, likes=1, uniques=2)
    put_speed(
        redis_client, "v1", b + 1, **{"views": 4, "dislikes": 2, "uniques": 1, "rejected:scripted_agent": 3}
    )

    answer = api.get("/v1/videos/v1/stats").json()

    assert (answer["views"], answer["likes"], answer["dislikes"], answer["unique_viewers"]) == (109, 8, 2, 43)
    assert answer["rejected"] == {"scripted_agent": 3}
    assert answer["batch_cutoff"] == cutoff
    assert answer["approx"] is False


def test_new_baseline_moves_the_boundary(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    publish(settings, "r1", b * settings.bucket_ms, [BaselineRow("v1", views=100)])
    put_speed(redis_client, "v1", b, views=5)
    put_speed(redis_client, "v1", b + 1, views=4)
    assert api.get("/v1/videos/v1/stats").json()["views"] == 109
    publish(settings, "r2", (b + 1) * settings.bucket_ms, [BaselineRow("v1", views=105)])
    answer = api.get("/v1/videos/v1/stats").json()
    assert (answer["views"], answer["batch_cutoff"]) == (109, (b + 1) * settings.bucket_ms)


def test_baseline_older_than_retention_is_flagged(api: TestClient, settings: Settings) -> None:
    publish(settings, "old", 10 * settings.bucket_ms, [BaselineRow("v1", views=3)])
    answer = api.get("/v1/videos/v1/stats").json()
    assert answer["approx"] is True
    assert "older than the speed retention" in answer["degraded"][0]


def test_unknown_video_is_zero_and_bad_id_is_422(api: TestClient) -> None:
    answer = api.get("/v1/videos/never-seen/stats")
    assert answer.status_code == 200
    assert answer.json()["views"] == 0
    bad = api.get("/v1/videos/bad%20id/stats")
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "video_id"


def test_user_liked_and_presence(api: TestClient, redis_client: redis.Redis) -> None:
    redis_client.hset(keys.reactions("v1"), mapping={"u1": "5|e1|liked", "u2": "6|e2|none"})
    now = time.time_ns() // 1_000_000
    redis_client.zadd(keys.presence("v1"), {"s1": now, "s2": now - 5_000, "s3": now - 120_000})
    assert api.get("/v1/videos/v1/stats", params={"user_id": "u1"}).json()["user_liked"] is True
    answer = api.get("/v1/videos/v1/stats", params={"user_id": "u2"}).json()
    assert answer["user_liked"] is False
    assert answer["watching_now"] == 2


def test_redis_down_serves_the_baseline_marked_approx(settings: Settings) -> None:
    down = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(down)) as api:
        assert api.get("/v1/videos/v1/stats").status_code == 503
        publish(down, "r1", bucket_now(settings) * settings.bucket_ms, [BaselineRow("v1", views=100)])
        answer = api.get("/v1/videos/v1/stats")
        assert answer.status_code == 200
        assert answer.json()["views"] == 100
        assert answer.json()["approx"] is True


def test_lost_speed_state_is_flagged(api: TestClient, settings: Settings, redis_client: redis.Redis) -> None:
    publish(settings, "r1", bucket_now(settings) * settings.bucket_ms, [BaselineRow("v1", views=100)])
    assert api.get("/v1/videos/v1/stats").json()["approx"] is False
    redis_client.flushdb()

    answer = api.get("/v1/videos/v1/stats").json()

    assert (answer["views"], answer["approx"]) == (100, True)
    assert "tally speed rebuild" in answer["degraded"][0]
