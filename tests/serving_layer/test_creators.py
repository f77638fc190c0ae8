"""GET /v1/creators/{id}/stats: a creator's videos together, after the real counter and a real batch
with the catalog, compared with the oracle's creator counts before and after the cutoff."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from counting import oracle
from counting.catalog import CatalogRow
from counting.event import Event
from counting.settings import Settings
from serving_layer.app import create_app
from serving_layer.timeseries import MAX_BUCKETS
from tests.serving_layer.conftest import Events
from tests.writers import Writers, closed_bucket, writers
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

pytestmark = pytest.mark.integration

CATALOG = {
    "v1": CatalogRow("v1", "c1", 600.0, True),
    "v2": CatalogRow("v2", "c1", 600.0, False),
    "v3": CatalogRow("v3", "c2", 600.0, True),
}
CREATORS = {video: row.creator_id for video, row in CATALOG.items()}


def _load_catalog(settings: Settings) -> None:
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, CATALOG.values())


def _served(api: TestClient, creator: str) -> tuple[int, int, int, int]:
    answer = api.get(f"/v1/creators/{creator}/stats").json()
    return answer["views"], answer["likes"], answer["dislikes"], answer["unique_viewers"]


def _expected(events: list[Event], creator: str) -> tuple[int, int, int, int]:
    c = oracle.creator_counts(events, CREATORS)[creator]
    return c.views, c.likes, c.dislikes, c.unique_viewers


def test_a_creators_reach_counts_a_viewer_of_several_videos_once(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    _load_catalog(settings)
    e = Events(settings.bucket_ms, prefix="reach")
    c = closed_bucket(settings) - 1
    before = [
        *e.views("v1", c, "ann", "bob", "cid"),
        *e.views("v2", c, "ann", "dee"),  # ann watched both before the cutoff
        *e.views("v3", c, "ann"),
        e.reaction("like", "v1", c, "ann"),
    ]
    after = [
        *e.views("v2", c + 1, "bob", "eve"),  # bob seen before the cutoff in v1; eve is new
        *e.views("v1", c + 1, "fay"),
        e.reaction("dislike", "v2", c + 1, "bob"),
    ]
    events = before + after
    tally.ingest(events)
    tally.count()

    assert _served(api, "c1") == _expected(events, "c1") == (8, 1, 1, 6)  # speed layer only
    with TestClient(create_app(settings.model_copy(update={"serving_cache_ms": 60_000}))) as cached:
        assert cached.get("/v1/creators/c1/stats").json()["batch_cutoff"] is None  # cached for 60 s
        tally.archive()
        tally.batch((c + 1) * settings.bucket_ms, videos=CATALOG)

        answer = api.get("/v1/creators/c1/stats").json()
        assert _served(cached, "c1") == _served(api, "c1")  # a new baseline: read at once
        assert cached.get("/v1/creators/c1/stats").json()["batch_cutoff"] == (c + 1) * settings.bucket_ms
    assert _served(api, "c1") == _expected(events, "c1")
    assert (answer["batch_cutoff"], answer["approx"], answer["videos"]) == (
        (c + 1) * settings.bucket_ms,
        False,
        2,
    )
    assert answer["views_display"] == "8"
    assert _served(api, "c2") == _expected(events, "c2") == (1, 0, 0, 1)
    per_video = oracle.count(events)
    assert per_video["v1"].unique_viewers + per_video["v2"].unique_viewers == 8, "ann and bob watched both"


def test_a_batch_without_the_catalog_makes_the_reach_an_estimate(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    _load_catalog(settings)
    e = Events(settings.bucket_ms, prefix="noreach")
    c = closed_bucket(settings) - 1
    events = [*e.views("v1", c, "ann", "bob"), *e.views("v2", c, "ann"), *e.views("v2", c + 1, "cid")]
    tally.ingest(events)
    tally.count()
    tally.archive()
    tally.batch((c + 1) * settings.bucket_ms)

    answer = api.get("/v1/creators/c1/stats").json()

    assert answer["approx"] is True and "without the catalog" in answer["degraded"][0]
    assert answer["views"] == _expected(events, "c1")[0]
    assert answer["unique_viewers"] == _expected(events, "c1")[3] == 3  # a HyperLogLog of 3 is exact


def test_an_unknown_creator_is_404_naming_the_field(api: TestClient, settings: Settings) -> None:
    _load_catalog(settings)
    answer = api.get("/v1/creators/nobody/stats")
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (404, "creator_id")
    answer = api.get("/v1/creators/bad;id/stats")
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "creator_id")


def test_a_creators_answer_and_a_videos_rank_are_read_once_within_the_bound(settings: Settings) -> None:
    # Hour-long buckets, so that the rank's window is the same for every request of the test.
    hourly = settings.model_copy(update={"bucket_ms": 3_600_000, "serving_cache_ms": 60_000})
    left = hourly.bucket_ms - time.time_ns() // 1_000_000 % hourly.bucket_ms
    if left < 60_000:
        time.sleep(left / 1000 + 0.1)
    _load_catalog(hourly)
    e = Events(hourly.bucket_ms, prefix="cached")
    c = closed_bucket(hourly) - 1
    first = [*e.views("v1", c, "ann", "bob"), *e.views("v3", c, "cid")]
    window = {"window_buckets": MAX_BUCKETS}
    with writers(hourly) as tally:
        tally.start()
        tally.ingest(first)
        tally.count()
        with TestClient(create_app(hourly)) as api:
            loaded = api.get("/v1/creators/c1/stats")
            ranked = api.get("/v1/videos/v3/rank", params=window).json()
            tally.ingest([*e.views("v2", c, "dee"), *e.views("v3", c, "eve", "fay", "gus")])
            tally.count()

            assert loaded.json()["views"] == _expected(first, "c1")[0] == 2
            assert api.get("/v1/creators/c1/stats").content == loaded.content  # within the bound
            assert (ranked["views"], ranked["rank"], ranked["of"]) == (1, 2, 2)
            assert api.get("/v1/videos/v3/rank", params=window).json() == ranked
            assert api.get("/v1/videos/v1/rank", params=window).json()["rank"] == 1
