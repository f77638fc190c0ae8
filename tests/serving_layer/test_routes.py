"""The serving routes beyond stats: timeseries, trending, admin, live push, dashboard, health."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from counting import trends
from counting.settings import Settings
from serving_layer.app import create_app
from tally.services import free_port
from tests.serving_layer.conftest import Events
from tests.writers import History, Writers, closed_bucket

pytestmark = pytest.mark.integration


def test_timeseries_merges_batch_buckets_and_speed_buckets(
    api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    """The `series` video of the shared history (see conftest): a burst in bucket C-1 that the
    speed layer partly counted and the batch rejected whole."""
    history.count(tally)
    run = history.runs[0]
    c = run.cutoff // settings.bucket_ms
    window = {"start": (c - 3) * settings.bucket_ms, "end": (c + 1) * settings.bucket_ms}

    def points() -> list[tuple[int, int, int, int, str]]:
        answer = api.get("/v1/videos/series/timeseries", params=window)
        assert answer.status_code == 200
        return [
            (p["bucket"], p["views"], p["rejected"], p["short_views"], p["source"])
            for p in answer.json()["points"]
        ]

    assert points() == [
        (c - 3, 7, 2, 1, "speed"),
        (c - 2, 0, 0, 0, "speed"),
        (c - 1, 34, 1, 0, "speed"),
        (c, 5, 3, 0, "speed"),
    ]
    history.publish(settings, run)
    assert points() == [
        (c - 3, 7, 2, 1, "batch"),
        (c - 2, 0, 0, 0, "batch"),
        (c - 1, 4, 31, 0, "batch"),  # before the cutoff the batch wins over the speed layer
        (c, 5, 3, 0, "speed"),
    ]


def test_timeseries_refuses_bad_ranges_naming_the_field(api: TestClient, settings: Settings) -> None:
    answer = api.get("/v1/videos/v1/timeseries", params={"start": 10_000, "end": 5_000})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "end")
    # Both in one bucket, the end before the start: still refused (it once answered one point).
    inside = settings.bucket_ms * 13
    answer = api.get("/v1/videos/v1/timeseries", params={"start": inside + 5, "end": inside + 1})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "end")
    answer = api.get("/v1/videos/v1/timeseries", params={"start": inside, "end": inside})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "end")
    answer = api.get("/v1/videos/v1/timeseries", params={"start": 0, "end": 10**12})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "start")
    answer = api.get("/v1/videos/v1/timeseries", params={"buckets": 0})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "buckets")


def test_trending_ranks_videos_over_the_window(api: TestClient, settings: Settings, tally: Writers) -> None:
    e = Events(settings.bucket_ms)
    b = time.time_ns() // 1_000_000 // settings.bucket_ms  # now: the ingest API stamps it
    tally.ingest(
        [
            *e.views("a", b, *(f"a{i}" for i in range(5))),
            *e.views("b", b, *(f"b{i}" for i in range(3))),
            *e.views("b", b - 1, *(f"b{i}" for i in range(3, 7))),
            *e.views("c", b - 1, "c0"),
            # Outside a 5-bucket window, even if b rolls over before the read:
            *e.views("c", b - 10, *(f"c{i}" for i in range(1, 11))),
        ]
    )
    tally.count()

    answer = api.get("/v1/trending", params={"window_buckets": 5, "limit": 2}).json()

    assert answer["videos"] == [{"video_id": "b", "views": 7}, {"video_id": "a", "views": 5}]


def test_admin_raw_needs_the_key(api: TestClient, settings: Settings) -> None:
    assert api.get("/v1/admin/videos/v1/raw").status_code == 401
    assert api.get("/v1/admin/videos/v1/raw", headers={"x-admin-key": "wrong"}).status_code == 401
    answer = api.get("/v1/admin/videos/v1/raw", headers={"x-admin-key": settings.admin_key})
    assert answer.status_code == 200
    assert answer.json()["events_in_log"] == 0


def test_live_pushes_the_counts(api: TestClient, settings: Settings, tally: Writers) -> None:
    e = Events(settings.bucket_ms)
    tally.ingest(e.views("v9", closed_bucket(settings), "u1", "u2", "u3"))
    tally.count()
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


def test_rank_places_a_video_as_the_oracle_does(api: TestClient, settings: Settings, tally: Writers) -> None:
    e = Events(settings.bucket_ms, prefix="rank")
    b = time.time_ns() // 1_000_000 // settings.bucket_ms
    events = [
        *e.views("a", b, *(f"a{i}" for i in range(5))),
        *e.views("b", b, *(f"b{i}" for i in range(3))),
        *e.views("c", b - 1, *(f"c{i}" for i in range(3))),
        *e.views("d", b - 20, "d0"),  # outside the window
    ]
    tally.ingest(events)
    tally.count()
    per_bucket = trends.bucket_views(events, settings.bucket_ms)

    for video, want_rank in (("c", 3), ("a", 1), ("d", None)):
        answer = api.get(f"/v1/videos/{video}/rank", params={"window_buckets": 5}).json()
        first, last, _, _ = trends.windows(answer["as_of"], settings.bucket_ms, 5, 0)
        place = trends.place_of(video, trends.window_views(per_bucket, first, last))
        assert (answer["views"], answer["rank"], answer["of"]) == (place.views, place.rank, place.of)
        assert answer["rank"] == want_rank
        assert (answer["scope"]["source"], answer["scope"]["window_buckets"]) == ("speed", 5)
    answer = api.get("/v1/videos/a/rank", params={"window_buckets": 0})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "window_buckets")


def test_trending_by_velocity_puts_the_rising_video_first(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    e = Events(settings.bucket_ms, prefix="velocity")
    b = time.time_ns() // 1_000_000 // settings.bucket_ms
    events = e.views("rising", b, *(f"r{i}" for i in range(10)))
    for back in range(0, 8):
        events += e.views("steady", b - back, *(f"s{back}-{i}" for i in range(2)))
    tally.ingest(events)
    tally.count()

    answer = api.get("/v1/trending", params={"by": "velocity", "window_buckets": 2}).json()

    first, last, base_first, base_last = trends.windows(answer["as_of"], settings.bucket_ms, 2, 6)
    per_bucket = trends.bucket_views(events, settings.bucket_ms)
    expected = trends.velocities(
        trends.window_views(per_bucket, first, last),
        trends.window_views(per_bucket, base_first, base_last),
        answer["as_of"],
        settings.bucket_ms,
        2,
        6,
    )
    served = [
        (v["video_id"], v["views"], v["views_per_minute"], v["baseline_per_minute"], v["rise"])
        for v in answer["videos"]
    ]
    assert served == [
        (v.video_id, v.recent_views, v.views_per_minute, v.baseline_per_minute, v.rise) for v in expected
    ]
    assert [v[0] for v in served] == ["rising", "steady"]
    assert (answer["by"], answer["baseline_buckets"]) == ("velocity", 6)
    assert answer["scope"] == {
        "source": "speed",
        "window_buckets": 2,
        "text": "speed layer, last 2 buckets of 2 s: counted as the events came, before a batch "
        "corrects them; not totals",
    }
    answer = api.get("/v1/trending", params={"by": "speed"})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "by")
