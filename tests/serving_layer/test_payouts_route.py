"""GET /v1/creators/{id}/payouts after several real batch runs (Spark, the quality gates, the real
payout writer): one current row per creator and day, every run's rows with `?history=true`, input
files summarised, creator ids checked like video ids."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

import pytest
from fastapi.testclient import TestClient

from counting.catalog import CatalogRow
from counting.settings import Settings
from counting.traffic import catalog_rows
from serving_layer.app import create_app
from tally import pipeline
from tests.batch_layer.test_batch_payouts import CUTOFF, TRAFFIC, oracle_views, traffic_events
from tests.logfiles import write_log
from tests.writers import archived_until
from warehouse.migrate import migrate
from warehouse.store import ledger_rows, open_store, upsert_catalog
from warehouse.tables import files_digest

# Great Expectations 1.24 imports the deprecated `sre_constants` module (the runs validate).
pytestmark = pytest.mark.filterwarnings(
    "ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"
)

# Three runs, each later than the one before: every (creator, day) gets one ledger row per run.
CUTOFFS = (CUTOFF - 10 * 60_000, CUTOFF - 5 * 60_000, CUTOFF)


@pytest.fixture(scope="module")
def paid(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> tuple[Settings, list[str]]:
    """A data directory after three published runs with payouts, and the runs' ids in order."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("payouts") / "data",
        bucket_ms=60_000,
        redis_url=redis_url,
        admin_key="test-admin-key-0123456789",
        collector_key="test-collector-key-0123456789",
        user_token_secret="test-user-token-secret-0123456789",
        serving_cache_ms=0,
    )
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(TRAFFIC))
    write_log(settings.raw_dir, traffic_events(TRAFFIC))
    archived_until(settings, CUTOFF)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GX_ANALYTICS_ENABLED", "False")
        runs = [pipeline.batch_run(settings, cutoff, payouts=True) for cutoff in CUTOFFS]
    assert all(run.published and run.payouts_written for run in runs)
    return settings, [run.result.run_id for run in runs]


@pytest.fixture(scope="module")
def paid_api(paid: tuple[Settings, list[str]]) -> Iterator[TestClient]:
    with TestClient(create_app(paid[0])) as client:
        yield client


def _expected(cutoff: int) -> dict[tuple[str, date], int]:
    return oracle_views(traffic_events(TRAFFIC), cutoff, catalog_rows(TRAFFIC))


@pytest.mark.slow
@pytest.mark.integration
def test_the_route_answers_the_current_row_of_each_creator_and_day(
    paid: tuple[Settings, list[str]], paid_api: TestClient
) -> None:
    settings, runs = paid
    expected = _expected(CUTOFF)
    creators = sorted({c for c, _ in expected})
    assert len(creators) >= 3

    answers = {c: paid_api.get(f"/v1/creators/{c}/payouts") for c in creators}

    assert {c: a.status_code for c, a in answers.items()} == dict.fromkeys(creators, 200)
    rows = [row for answer in answers.values() for row in answer.json()["payouts"]]
    assert {(r["creator_id"], date.fromisoformat(r["day"])): r["monetizable_views"] for r in rows} == expected
    assert len(rows) == len(expected)  # one row per creator and day, not one per run
    assert {(r["run_id"], r["current"], r["run_cutoff"]) for r in rows} == {(runs[-1], True, CUTOFF)}
    with open_store(settings.store_url) as store:
        ledger = {
            (r.creator_id, r.day.isoformat(), r.run_id): r for c in creators for r in ledger_rows(store, c)
        }
    for row in rows:
        written = ledger[(row["creator_id"], row["day"], row["run_id"])]
        assert row["amount"] == str(written.amount)
        assert row["counted_ids_digest"] == written.counted_ids_digest
        assert row["input_files"] == {
            "count": len(written.input_files),
            "digest": files_digest(written.input_files),
        }
    by_day = answers[creators[0]].json()["payouts"]
    assert [r["day"] for r in by_day] == sorted((r["day"] for r in by_day), reverse=True)
    one_day = paid_api.get(f"/v1/creators/{creators[0]}/payouts", params={"from": "2026-06-02"})
    assert [r["day"] for r in one_day.json()["payouts"]] == ["2026-06-02"]


@pytest.mark.slow
@pytest.mark.integration
def test_history_answers_every_runs_rows_with_the_current_one_first(
    paid: tuple[Settings, list[str]], paid_api: TestClient
) -> None:
    _, runs = paid
    figures = {cutoff: _expected(cutoff) for cutoff in CUTOFFS}
    creator, day = max(figures[CUTOFFS[0]], key=lambda key: figures[CUTOFFS[0]][key])

    answer = paid_api.get(f"/v1/creators/{creator}/payouts", params={"history": "true"})

    assert answer.status_code == 200
    assert answer.json()["history"] is True
    of_day = [r for r in answer.json()["payouts"] if r["day"] == day.isoformat()]
    assert [(r["run_id"], r["current"]) for r in of_day] == [
        (runs[2], True),
        (runs[1], False),
        (runs[0], False),
    ]
    assert [r["monetizable_views"] for r in of_day] == [figures[c][(creator, day)] for c in reversed(CUTOFFS)]
    every = answer.json()["payouts"]
    assert sum(r["current"] for r in every) == len({r["day"] for r in every})


@pytest.mark.parametrize("creator", ["c 1", "c;drop", "x" * 65, "é"])
def test_a_malformed_creator_id_is_refused_naming_it(api: TestClient, creator: str) -> None:
    answer = api.get(f"/v1/creators/{creator}/payouts")
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "creator_id"


def test_payouts_route_refuses_a_reversed_range(api: TestClient, settings: Settings) -> None:
    migrate(settings.store_url)
    answer = api.get("/v1/creators/c7/payouts", params={"from": "2026-11-21", "to": "2026-11-20"})
    assert (answer.status_code, answer.json()["errors"][0]["field"]) == (422, "to")
    bad = api.get("/v1/creators/c7/payouts", params={"from": "yesterday"})
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (422, "from")


def test_a_creator_of_the_catalog_has_no_payouts_before_any_payout_run(
    api: TestClient, settings: Settings
) -> None:
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, [CatalogRow("v7", "c7", 600.0, True)])

    answer = api.get("/v1/creators/c7/payouts")

    assert (answer.status_code, answer.json()) == (200, {"creator_id": "c7", "history": False, "payouts": []})


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "no-catalog"])
def test_a_creator_not_in_the_catalog_is_404_naming_it_as_on_its_stats(
    api: TestClient, settings: Settings, catalog: bool
) -> None:
    if catalog:
        migrate(settings.store_url)
        with open_store(settings.store_url) as store:
            upsert_catalog(store, [CatalogRow("v7", "c7", 600.0, True)])

    payouts = api.get("/v1/creators/nobody/payouts")
    stats = api.get("/v1/creators/nobody/stats")

    assert payouts.status_code == stats.status_code == 404
    assert payouts.json() == stats.json()
    assert payouts.json() == {
        "errors": [
            {
                "field": "creator_id",
                "reason": "'nobody' has no video in the catalog: list its creators with 'tally catalog "
                "list', load it with 'tally catalog load'",
                "value": "nobody",
            }
        ]
    }


def test_openapi_describes_the_404_of_both_creator_routes(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for route in ("/v1/creators/{creator_id}/payouts", "/v1/creators/{creator_id}/stats"):
        missing = paths[route]["get"]["responses"]["404"]
        assert missing["description"].startswith("the creator has no video in the catalog"), route
        assert missing["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorAnswer"
        }
