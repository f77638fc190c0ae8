"""A milestone's times as the store keeps them and the routes serve them: timezone-aware UTC, ISO
text with its offset (as the payouts' times), whatever zone the recording clock gave."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from counting.settings import Settings
from warehouse.migrate import migrate
from warehouse.milestones import Milestone, mark_announced, milestones_of, record_milestones
from warehouse.store import open_store

# 13:30 in a zone two hours east of UTC: 11:30 UTC.
RECORDED = datetime(2026, 11, 20, 13, 30, 5, 250_000, tzinfo=timezone(timedelta(hours=2)))
ANNOUNCED = datetime(2026, 11, 20, 11, 31, tzinfo=UTC)


def _record(settings: Settings) -> None:
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        record_milestones(store, [Milestone("v1", 1_000, 1_234, "run-1", 1_795_000_000_000, RECORDED)])
        mark_announced(store, [("v1", 1_000)], ANNOUNCED)


def test_the_store_gives_a_milestones_times_back_in_utc(settings: Settings) -> None:
    _record(settings)

    with open_store(settings.store_url) as store:
        [read] = milestones_of(store, "v1")

    assert read.recorded_at == datetime(2026, 11, 20, 11, 30, 5, 250_000, tzinfo=UTC)
    assert read.recorded_at.utcoffset() == timedelta(0)
    assert read.announced_at == ANNOUNCED and read.announced_at.utcoffset() == timedelta(0)


def test_the_store_refuses_a_time_without_a_zone(settings: Settings) -> None:
    migrate(settings.store_url)
    naive = datetime(2026, 11, 20, 13, 30)
    with open_store(settings.store_url) as store, pytest.raises(ValueError, match="2026-11-20T13:30:00"):
        record_milestones(store, [Milestone("v1", 1_000, 1_234, "run-1", 1_795_000_000_000, naive)])


def test_the_routes_serve_recorded_at_as_utc_iso_text_with_its_offset(
    api: TestClient, settings: Settings
) -> None:
    _record(settings)

    of_video = api.get("/v1/videos/v1/milestones")
    overview = api.get("/v1/overview")

    assert of_video.status_code == 200, of_video.text
    [served] = of_video.json()["milestones"]
    assert served["recorded_at"] == "2026-11-20T11:30:05.250000+00:00"
    assert datetime.fromisoformat(served["recorded_at"]) == RECORDED
    assert overview.status_code == 200, overview.text
    assert [m["recorded_at"] for m in overview.json()["milestones"]] == ["2026-11-20T11:30:05.250000+00:00"]
