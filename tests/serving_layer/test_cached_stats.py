"""The stats route's cached answers, sent before FastAPI's routing: the same answer as the route's,
within the staleness bound, counted by the metrics; and the one-round-trip speed read. Redis and the
baselines are filled by Tally's real writers (the `cached`, `burst` and `v30` videos of the shared
history, see conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from counting import keys, oracle
from counting.settings import Settings
from serving_layer.app import create_app
from tests.serving_layer.conftest import SPEED_BUCKETS, Events
from tests.writers import History, Writers, closed_bucket

pytestmark = pytest.mark.integration


@pytest.fixture
def cached_api(settings: Settings, redis_client: redis.Redis, tally: Writers) -> Iterator[TestClient]:
    """The API with a staleness bound long enough that every repeat read is a cache hit."""
    tally.start()
    with TestClient(create_app(settings.model_copy(update={"serving_cache_ms": 60_000}))) as client:
        yield client


def test_a_cached_answer_is_the_routes_answer_until_the_bound(
    cached_api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    history.count(tally)
    history.publish(settings, history.runs[0])
    expected = oracle.count(history.events)["cached"]
    assert (expected.views, expected.likes) == (5, 3)

    loaded = cached_api.get("/v1/videos/cached/stats")
    e = Events(settings.bucket_ms)
    tally.ingest(e.views("cached", closed_bucket(settings), "u5", "u6", "u7", "u8"))
    tally.count()  # within the bound: not seen yet
    cached = cached_api.get("/v1/videos/cached/stats")

    assert (loaded.status_code, cached.status_code) == (200, 200)
    assert cached.content == loaded.content
    assert cached.headers["content-type"] == loaded.headers["content-type"] == "application/json"
    assert cached.headers["content-length"] == loaded.headers["content-length"]
    assert (cached.json()["views"], cached.json()["likes"]) == (expected.views, expected.likes)
    served = 'tally_http_requests_total{method="GET",route="/v1/videos/{video_id}/stats",status="200"}'
    assert f"{served} 2.0" in cached_api.get("/metrics").text


def test_a_new_baseline_is_read_at_once_despite_the_cache(
    cached_api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    history.count(tally)
    first, second = history.runs
    exact = oracle.count(history.events)["burst"].views
    assert exact == 3, "the story of `burst` (conftest) has what it says"
    history.publish(settings, first)
    # the first baseline's 2 views, then the speed layer's: the burst's first 30 views and 1 clean
    assert cached_api.get("/v1/videos/burst/stats").json()["views"] == 33
    history.publish(settings, second)  # the batch at the next cutoff corrects the burst

    assert cached_api.get("/v1/videos/burst/stats").json()["views"] == exact


def test_user_reaction_and_bad_ids_are_not_served_from_the_cache(
    cached_api: TestClient, settings: Settings, tally: Writers
) -> None:
    assert cached_api.get("/v1/videos/v1/stats").status_code == 200
    tally.ingest([Events(settings.bucket_ms).reaction("like", "v1", closed_bucket(settings), "u1")])
    tally.count()

    answer = cached_api.get("/v1/videos/v1/stats", params={"user_id": "u1"}).json()

    assert (answer["user_liked"], answer["user_disliked"]) == (True, False)
    assert cached_api.get("/v1/videos/v1/stats", params={"user_id": ""}).status_code == 422
    assert cached_api.get("/v1/videos/v1%0A/stats").status_code == 422
    assert cached_api.get("/v1/videos/v1/stats/", follow_redirects=False).status_code == 307


def test_speed_read_sums_the_buckets_from_the_cutoff_in_one_script(
    api: TestClient, settings: Settings, redis_client: redis.Redis, tally: Writers, history: History
) -> None:
    history.count(tally)
    run = history.runs[0]
    history.publish(settings, run)
    base = oracle.count(history.events, run.cutoff)["v30"]
    assert (base.views, base.rejected) == (10, {"scripted_agent": 1})
    # Fields a later counter version might file in a bucket; no writer of this version does: the
    # read leaves them out.
    last = run.cutoff // settings.bucket_ms + SPEED_BUCKETS - 1
    redis_client.hset(keys.bucket_counts("v30", last), mapping={"rejected:not_a_reason": 5, "other": 9})

    answer = api.get("/v1/videos/v30/stats").json()

    assert (answer["views"], answer["rejected"]) == (70, {"scripted_agent": 31})
    expected = oracle.count(history.events)["v30"]
    assert (answer["views"], answer["rejected"]) == (expected.views, expected.rejected)


def test_speed_read_survives_a_script_flush(
    api: TestClient, settings: Settings, redis_client: redis.Redis, tally: Writers
) -> None:
    tally.ingest(Events(settings.bucket_ms).views("v1", closed_bucket(settings), "u1", "u2", "u3"))
    tally.count()
    assert api.get("/v1/videos/v1/stats").json()["views"] == 3
    redis_client.script_flush()

    answer = api.get("/v1/videos/v1/stats").json()

    assert (answer["views"], answer["approx"]) == (3, False)
