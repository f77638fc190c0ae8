"""The stats route's cached answers, sent before FastAPI's routing: the same answer as the route's,
within the staleness bound, counted by the metrics; and the one-round-trip speed read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from counting import keys
from counting.settings import Settings
from serving_layer.app import create_app
from tests.serving_layer.conftest import bucket_now, claim_partitions, publish, put_speed
from warehouse.baseline import BaselineRow

pytestmark = pytest.mark.integration


@pytest.fixture
def cached_api(settings: Settings, redis_client: redis.Redis) -> Iterator[TestClient]:
    """The API with a staleness bound long enough that every repeat read is a cache hit."""
    claim_partitions(redis_client, settings)
    with TestClient(create_app(settings.model_copy(update={"serving_cache_ms": 60_000}))) as client:
        yield client


def test_a_cached_answer_is_the_routes_answer_until_the_bound(
    cached_api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    publish(settings, "r1", b * settings.bucket_ms, [BaselineRow("v1", views=100, likes=7)])
    put_speed(redis_client, "v1", b, views=5, likes=1)

    loaded = cached_api.get("/v1/videos/v1/stats")
    put_speed(redis_client, "v1", b + 1, views=4)  # within the bound: not seen yet
    cached = cached_api.get("/v1/videos/v1/stats")

    assert (loaded.status_code, cached.status_code) == (200, 200)
    assert cached.content == loaded.content
    assert cached.headers["content-type"] == loaded.headers["content-type"] == "application/json"
    assert cached.headers["content-length"] == loaded.headers["content-length"]
    assert (cached.json()["views"], cached.json()["likes"]) == (105, 8)
    served = 'tally_http_requests_total{method="GET",route="/v1/videos/{video_id}/stats",status="200"}'
    assert f"{served} 2.0" in cached_api.get("/metrics").text


def test_a_new_baseline_is_read_at_once_despite_the_cache(
    cached_api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    publish(settings, "r1", b * settings.bucket_ms, [BaselineRow("v1", views=100)])
    assert cached_api.get("/v1/videos/v1/stats").json()["views"] == 100
    publish(settings, "r2", b * settings.bucket_ms, [BaselineRow("v1", views=120)])
    assert cached_api.get("/v1/videos/v1/stats").json()["views"] == 120


def test_user_reaction_and_bad_ids_are_not_served_from_the_cache(
    cached_api: TestClient, redis_client: redis.Redis
) -> None:
    assert cached_api.get("/v1/videos/v1/stats").status_code == 200
    redis_client.hset(keys.reactions("v1"), mapping={"u1": "5|e1|liked"})

    answer = cached_api.get("/v1/videos/v1/stats", params={"user_id": "u1"}).json()

    assert (answer["user_liked"], answer["user_disliked"]) == (True, False)
    assert cached_api.get("/v1/videos/v1/stats", params={"user_id": ""}).status_code == 422
    assert cached_api.get("/v1/videos/v1%0A/stats").status_code == 422
    assert cached_api.get("/v1/videos/v1/stats/", follow_redirects=False).status_code == 307


def test_speed_read_sums_the_buckets_from_the_cutoff_in_one_script(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    base = BaselineRow("v1", views=10, rejected={"scripted_agent": 1})
    publish(settings, "r1", b * settings.bucket_ms, [base])
    for i in range(30):
        put_speed(redis_client, "v1", b + i, views=2, short_views=1, **{"rejected:scripted_agent": 1})
    put_speed(redis_client, "v1", b + 30, **{"rejected:not_a_reason": 5, "other": 9})

    answer = api.get("/v1/videos/v1/stats").json()

    assert (answer["views"], answer["rejected"]) == (70, {"scripted_agent": 31})


def test_speed_read_survives_a_script_flush(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    put_speed(redis_client, "v1", bucket_now(settings), views=3)
    assert api.get("/v1/videos/v1/stats").json()["views"] == 3
    redis_client.script_flush()

    answer = api.get("/v1/videos/v1/stats").json()

    assert (answer["views"], answer["approx"]) == (3, False)
