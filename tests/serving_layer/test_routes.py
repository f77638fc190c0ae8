"""The serving routes beyond stats: timeseries, trending, admin, live push, dashboard, health."""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient

from counting import keys
from counting.settings import Settings
from serving_layer.app import create_app
from tally.services import free_port
from tests.serving_layer.conftest import bucket_now, publish
from warehouse.baseline import BaselineRow

pytestmark = pytest.mark.integration


def test_timeseries_merges_batch_buckets_and_speed_buckets(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    series = [
        {"video_id": "v1", "bucket": b - 3, "views": 7, "rejected": 2, "short_views": 1},
        {"video_id": "v1", "bucket": b - 1, "views": 4, "rejected": 0, "short_views": 0},
        {"video_id": "v2", "bucket": b - 1, "views": 99, "rejected": 0, "short_views": 0},
    ]
    publish(settings, "r1", b * settings.bucket_ms, [BaselineRow("v1", views=11)], series)
    redis_client.hset(keys.bucket_counts("v1", b - 1), mapping={"views": 1000})  # before C: batch wins
    redis_client.hset(keys.bucket_counts("v1", b), mapping={"views": 5, "rejected:scripted_agent": 3})

    window = {"start": (b - 3) * settings.bucket_ms, "end": (b + 1) * settings.bucket_ms}
    answer = api.get("/v1/videos/v1/timeseries", params=window)

    assert answer.status_code == 200
    points = [(p["bucket"], p["views"], p["rejected"], p["source"]) for p in answer.json()["points"]]
    assert points == [
        (b - 3, 7, 2, "batch"),
        (b - 2, 0, 0, "batch"),
        (b - 1, 4, 0, "batch"),
        (b, 5, 3, "speed"),
    ]


def test_timeseries_refuses_bad_ranges_naming_the_field(api: TestClient, settings: Settings) -> None:
    answer = api.get("/v1/videos/v1/timeseries", params={"start": 10_000, "end": 5_000})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "end")
    answer = api.get("/v1/videos/v1/timeseries", params={"start": 0, "end": 10**12})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "start")
    answer = api.get("/v1/videos/v1/timeseries", params={"buckets": 0})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "buckets")


def test_trending_ranks_videos_over_the_window(
    api: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    b = bucket_now(settings)
    redis_client.zadd(keys.trending(b), {"a": 5, "b": 3})
    redis_client.zadd(keys.trending(b - 1), {"b": 4, "c": 1})
    redis_client.zadd(keys.trending(b - 10), {"c": 100})  # outside a 5-bucket window, even if b rolls over

    answer = api.get("/v1/trending", params={"window_buckets": 5, "limit": 2}).json()

    assert answer["videos"] == [{"video_id": "b", "views": 7}, {"video_id": "a", "views": 5}]


def test_admin_raw_needs_the_key(api: TestClient, settings: Settings) -> None:
    assert api.get("/v1/admin/videos/v1/raw").status_code == 401
    assert api.get("/v1/admin/videos/v1/raw", headers={"x-admin-key": "wrong"}).status_code == 401
    answer = api.get("/v1/admin/videos/v1/raw", headers={"x-admin-key": settings.admin_key})
    assert answer.status_code == 200
    assert answer.json()["events_in_log"] == 0


def test_live_pushes_the_counts(api: TestClient, redis_client: redis.Redis, settings: Settings) -> None:
    redis_client.hset(keys.bucket_counts("v9", bucket_now(settings)), mapping={"views": 3})
    redis_client.zadd(keys.buckets_index("v9"), {str(bucket_now(settings)): bucket_now(settings)})
    with api.stream("GET", "/v1/videos/v9/live") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith("data:"):
                break
    assert lines[0] == "event: stats"
    assert '"views":3' in lines[1]


def test_dashboard_and_its_assets_are_served(api: TestClient) -> None:
    page = api.get("/dashboard")
    assert page.status_code == 200
    assert "/static/dashboard.js" in page.text
    assert api.get("/static/dashboard.js").status_code == 200
    assert api.get("/static/dashboard.css").status_code == 200


def test_metrics_count_requests_by_route(api: TestClient) -> None:
    api.get("/v1/videos/v1/stats")
    body = api.get("/metrics").text
    assert 'tally_http_requests_total{method="GET",route="/v1/videos/{video_id}/stats",status="200"}' in body


def test_ready_with_redis_and_not_without_anything(api: TestClient, settings: Settings) -> None:
    assert api.get("/readyz").json()["ready"] is True
    down = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(down)) as client:
        answer = client.get("/readyz")
        assert (answer.status_code, answer.json()["redis"]) == (503, False)
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/trending").status_code == 503


def test_openapi_describes_every_route(api: TestClient) -> None:
    paths = set(api.get("/openapi.json").json()["paths"])
    assert {
        "/v1/videos/{video_id}/stats",
        "/v1/videos/{video_id}/timeseries",
        "/v1/trending",
        "/v1/creators/{creator_id}/payouts",
        "/v1/admin/videos/{video_id}/raw",
        "/v1/videos/{video_id}/live",
    } <= paths
