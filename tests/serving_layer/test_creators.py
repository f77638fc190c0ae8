"""GET /v1/creators/{id}/stats: a creator's videos together, after the real counter and a real batch
with the catalog, compared with the oracle's creator counts before and after the cutoff."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from counting import oracle
from counting.catalog import CatalogRow
from counting.event import Event
from counting.settings import Settings
from tests.serving_layer.conftest import Events
from tests.writers import Writers, closed_bucket
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
    tally.archive()
    tally.batch((c + 1) * settings.bucket_ms, videos=CATALOG)

    answer = api.get("/v1/creators/c1/stats").json()
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
