"""GET /v1/creators/{id}/payouts: the ledger rows with their audit fields, from the real store."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from fastapi.testclient import TestClient

from counting.settings import Settings
from warehouse.migrate import migrate
from warehouse.store import PayoutRow, RunRecord, open_store, write_ledger


def _row(day: date, views: int) -> PayoutRow:
    return PayoutRow(
        creator_id="c7",
        day=day,
        run_id="run-1",
        rules_version="2026.11.1",
        monetizable_views=views,
        rate_per_1000=Decimal("2.00"),
        currency="USD",
        amount=Decimal(views) * Decimal("0.002"),
        input_files={"ingest_date=2026-11-20/ingest_hour=10/events-p0-1-9.parquet": "ab" * 32},
        counted_ids_digest="cd" * 32,
    )


def test_payouts_route_answers_the_ledger_with_audit_fields(api: TestClient, settings: Settings) -> None:
    migrate(settings.store_url)
    run = RunRecord("run-1", 1_795_000_000_000, "2026.11.1", datetime.now(UTC), "succeeded")
    with open_store(settings.store_url) as store:
        write_ledger(store, run, [_row(date(2026, 11, 20), 1200), _row(date(2026, 11, 21), 5)])

    answer = api.get("/v1/creators/c7/payouts", params={"from": "2026-11-21"})

    assert answer.status_code == 200
    rows = answer.json()["payouts"]
    assert [(r["day"], r["monetizable_views"], r["amount"]) for r in rows] == [("2026-11-21", 5, "0.010000")]
    assert rows[0]["counted_ids_digest"] == "cd" * 32
    assert rows[0]["run_id"] == "run-1" and rows[0]["rules_version"] == "2026.11.1"
    everything = api.get("/v1/creators/c7/payouts").json()["payouts"]
    assert [r["day"] for r in everything] == ["2026-11-21", "2026-11-20"]
    assert api.get("/v1/creators/nobody/payouts").json()["payouts"] == []


def test_payouts_route_refuses_a_reversed_range(api: TestClient, settings: Settings) -> None:
    migrate(settings.store_url)
    answer = api.get("/v1/creators/c7/payouts", params={"from": "2026-11-21", "to": "2026-11-20"})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "to")
    bad = api.get("/v1/creators/c7/payouts", params={"from": "yesterday"})
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (422, "from")


def test_payouts_before_any_payout_run_are_empty(api: TestClient) -> None:
    answer = api.get("/v1/creators/c7/payouts")
    assert (answer.status_code, answer.json()["payouts"]) == (200, [])
