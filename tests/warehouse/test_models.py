"""Each warehouse model on a tiny build of what the real writers wrote: the events ingested and
archived, the catalog in the store, two batch runs published, recorded and paid; every expectation
written out by hand from the events."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pytest
from pyspark.sql import SparkSession

from batch_layer.payouts import run_payouts
from counting import bots
from counting.catalog import CatalogRow
from counting.event import Event
from counting.settings import Settings
from tally import pipeline
from tests.writers import writers
from warehouse.build import BuildReport, build_warehouse
from warehouse.errors import WarehouseBuildError
from warehouse.migrate import migrate
from warehouse.models import MODELS_DIR, load_models
from warehouse.store import open_store, upsert_catalog

RUN = "run-2-latest"
OLD_RUN = "run-1-older"
HOUR = 3_600_000
# The events fall on the two UTC days before TODAY, the day of an hour ago: TODAY's midnight, the
# latest cutoff, is then below the archiver's watermark (now less a second of delivery grace) even
# when the tests run just after midnight.
TODAY = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).date()
D1, D2 = TODAY - dt.timedelta(days=2), TODAY - dt.timedelta(days=1)
DAY1 = int(dt.datetime.combine(D1, dt.time(), dt.UTC).timestamp() * 1000)
DAY2 = DAY1 + 86_400_000
CUTOFF = DAY2 + 86_400_000  # TODAY's midnight: the latest run reads every event
OLD_CUTOFF = DAY1 + 2 * HOUR  # the older run reads day 1 up to bob's view of v1 (excluded)
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
CATALOG = [
    CatalogRow("v1", "c1", 120.0, True),
    CatalogRow("v2", "c1", 120.0, False),
    CatalogRow("v3", "c2", 30.0, True),
]
ALLOW_DECREASE = "removed a replayed file"


def _view(n: int, video: str, ts: int, user: str, **fields: Any) -> Event:
    values: dict[str, Any] = {
        "event_id": f"e{n}",
        "type": "view",
        "video_id": video,
        "ts": ts,
        "user_id": user,
        "session_id": f"s-{user}",
        "ip": "81.2.69.160",
        "user_agent": BROWSER,
        "watch_secs": 60.0,
        "video_duration_secs": 120.0,
        "ingest_ts": ts + 200,
    }
    values.update(fields)
    return Event(**values)


def _events() -> list[Event]:
    return [
        _view(1, "v1", DAY1 + HOUR, "alice"),
        _view(2, "v1", DAY1 + 2 * HOUR, "bob"),
        _view(3, "v1", DAY2 + HOUR, "alice"),
        _view(4, "v2", DAY1 + HOUR, "carol"),
        _view(5, "v2", DAY1 + HOUR + 1, "dave", user_agent="python-requests/2.31"),
        _view(6, "v2", DAY2 + HOUR, "erin", ip="52.1.2.3", ja3="3b5074b1b5d032e5620f69f9f700ff0e"),
        _view(7, "v3", DAY2 + 3 * HOUR, "frank", watch_secs=10.0),
        Event(
            event_id="e8",
            type="like",
            video_id="v1",
            ts=DAY1 + HOUR,
            user_id="alice",
            ingest_ts=DAY1 + HOUR + 9,
        ),
        Event(
            event_id="e9",
            type="dislike",
            video_id="v2",
            ts=DAY1 + HOUR,
            user_id="bob",
            ingest_ts=DAY1 + HOUR + 9,
        ),
    ]


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, spark: SparkSession
) -> tuple[BuildReport, int]:
    """The build after the real writers: the events ingested (the first sent again a second later,
    a client's retry) and archived, the catalog in the store, then a batch run at OLD_CUTOFF and
    one at CUTOFF, each published and recorded as the DAG's `publish` does (the latest with an
    operator's reason to let views fall) and paid by the payout writer. Also the log rows sent."""
    topic = f"warehouse-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("warehouse") / "data",
        bucket_ms=2_000,
        redis_url=redis_url,
        events_topic=topic,
        dead_letter_topic=f"{topic}-dlq",
        topic_partitions=2,
        delivery_timeout_ms=1_000,
        payout_rate_per_1000_views=Decimal("2.00"),
        payout_currency="USD",
    )
    events = _events()
    first = events[0]
    assert first.ingest_ts is not None
    sent = [*events, msgspec.structs.replace(first, ingest_ts=first.ingest_ts + 1_000)]
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, CATALOG)
    with writers(settings, spark=lambda: spark) as tally:
        tally.ingest(sent)
        assert tally.archive() >= CUTOFF
        for run_id, cutoff, reason in ((OLD_RUN, OLD_CUTOFF, None), (RUN, CUTOFF, ALLOW_DECREASE)):
            computed = tally.batch(cutoff, run_id=run_id, publish=False)
            assert pipeline.publish(settings, asdict(computed), allow_decrease_reason=reason)
            run_payouts(settings, run_id, cutoff, spark=spark)
    return build_warehouse(settings), len(sent)


def _query(report: BuildReport, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(report.path), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
@pytest.mark.integration
def test_the_file_opens_read_only_with_every_model(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    names = {m.name for m in load_models()}
    assert {m.name for m in report.models} == names
    found = _query(report, "select table_name, table_type from information_schema.tables")
    kinds = {name: kind for name, kind in found}
    assert {n for n in names if n.startswith("stg_")} <= {n for n, k in kinds.items() if k == "VIEW"}
    assert {n for n in names if n.startswith("mart_")} <= {n for n, k in kinds.items() if k == "BASE TABLE"}
    assert report.run_id == RUN
    assert not list(report.path.parent.glob(".*.tmp*"))  # nothing left aside


def test_models_are_ordered_after_what_they_read() -> None:
    order = [m.name for m in load_models(MODELS_DIR)]
    assert order.index("stg_daily_video") < order.index("mart_daily_video_stats")
    assert order.index("stg_videos") < order.index("mart_top_videos")
    assert order.index("stg_payout_ledger") < order.index("mart_creator_payouts")


@pytest.mark.slow
@pytest.mark.integration
def test_stg_events_has_every_log_row_typed(built: tuple[BuildReport, int]) -> None:
    report, written = built
    rows = _query(
        report,
        "select count(*), count(distinct event_id), min(event_time), min(ingest_date), max(ingest_hour) "
        "from stg_events",
    )
    assert rows == [(written, 9, dt.datetime.combine(D1, dt.time(1)), D1, 3)]
    assert report_rows(report, "stg_events") == written


def report_rows(report: BuildReport, name: str) -> int:
    return next(m.rows for m in report.models if m.name == name)


@pytest.mark.slow
@pytest.mark.integration
def test_stg_baseline_is_the_published_run(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report,
        "select video_id, views, likes, dislikes, unique_viewers, short_views, rejected_scripted_agent, "
        "rejected_datacenter_ip, run_id, cutoff from stg_baseline order by video_id",
    )
    assert rows == [
        ("v1", 3, 1, 0, 2, 0, 0, 0, RUN, CUTOFF),
        ("v2", 1, 0, 1, 1, 0, 1, 1, RUN, CUTOFF),
        ("v3", 0, 0, 0, 0, 1, 0, 0, RUN, CUTOFF),
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_stg_daily_video_is_the_runs_daily_output(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(report, "select date, video_id, views, run_id from stg_daily_video order by date, video_id")
    assert rows == [
        (D1, "v1", 2, RUN),
        (D1, "v2", 1, RUN),
        (D2, "v1", 1, RUN),
        (D2, "v2", 0, RUN),
        (D2, "v3", 0, RUN),
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_store_staging_models_copy_the_store(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    assert _query(report, "select video_id, creator_id, monetized from stg_videos order by 1") == [
        ("v1", "c1", True),
        ("v2", "c1", False),
        ("v3", "c2", True),
    ]
    # the older run paid c1 one view of day 1; the latest run two of day 1 and one of day 2 (v3's
    # one view is short: c2 is paid nothing)
    assert _query(report, "select count(*), sum(amount) from stg_payout_ledger") == [(3, Decimal("0.008000"))]
    assert report.sources == {"raw_videos": 3, "raw_payout_ledger": 3, "raw_batch_runs": 2}
    runs = _query(
        report,
        "select run_id, cutoff, status, allow_decrease_reason, skip_validation, forced "
        "from stg_batch_runs order by run_id",
    )
    assert runs == [
        (OLD_RUN, OLD_CUTOFF, "succeeded", None, False, False),
        (RUN, CUTOFF, "succeeded", ALLOW_DECREASE, False, False),
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_mart_daily_video_stats(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report,
        "select date, video_id, creator_id, monetized, views, unique_viewers, likes, dislikes, short_views, "
        "rejected_views from mart_daily_video_stats order by date, video_id",
    )
    assert rows == [
        (D1, "v1", "c1", True, 2, 2, 1, 0, 0, 0),
        (D1, "v2", "c1", False, 1, 1, 0, 1, 0, 1),
        (D2, "v1", "c1", True, 1, 1, 0, 0, 0, 0),
        (D2, "v2", "c1", False, 0, 0, 0, 0, 0, 1),
        (D2, "v3", "c2", True, 0, 0, 0, 0, 1, 0),
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_mart_top_videos(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(report, "select rank, video_id, creator_id, views, like_ratio, as_of from mart_top_videos")
    as_of = dt.datetime.combine(TODAY, dt.time())
    assert rows == [
        (1, "v1", "c1", 3, Decimal("1.0"), as_of),
        (2, "v2", "c1", 1, Decimal("0.0"), as_of),
        (3, "v3", "c2", 0, None, as_of),
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_mart_rejected_by_reason_day(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report, "select date, reason, rejected_views, videos, share_of_day from mart_rejected_by_reason_day"
    )
    assert [r[:4] for r in rows] == [(D1, "scripted_agent", 1, 1), (D2, "datacenter_ip", 1, 1)]
    assert [float(r[4]) for r in rows] == [1.0, 1.0]


@pytest.mark.slow
@pytest.mark.integration
def test_mart_explained_views_says_why_each_view_was_refused(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report,
        "select date, event_id, video_id, creator_id, verdict, reason, score, signals, signal_count "
        "from mart_explained_views",
    )
    assert rows == [
        (D1, "e5", "v2", "c1", "rejected", "scripted_agent", 1.0, "scripted_agent", 1),
        (D2, "e6", "v2", "c1", "rejected", "datacenter_ip", 1.2, "datacenter_ip + bad_ja3", 2),
    ]
    thresholds = _query(
        report, "select distinct reject_score, soft_score, rules_version from mart_explained_views"
    )
    assert thresholds == [(1.0, 0.5, bots.SHIPPED.version)]


@pytest.mark.slow
@pytest.mark.integration
def test_mart_creator_payouts_takes_the_latest_run(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report,
        "select creator_id, day, monetizable_views, amount, currency, run_id from mart_creator_payouts",
    )
    assert rows == [
        ("c1", D1, 2, Decimal("0.004000"), "USD", RUN),
        ("c1", D2, 1, Decimal("0.002000"), "USD", RUN),
    ]
    reasons = _query(report, "select distinct allow_decrease_reason from mart_creator_payouts")
    assert reasons == [(ALLOW_DECREASE,)]


def test_an_empty_data_dir_builds_empty_typed_models(tmp_path: Path) -> None:
    report = build_warehouse(Settings(data_dir=tmp_path / "data"))
    assert report.run_id is None
    assert all(m.rows == 0 for m in report.models)
    assert not (tmp_path / "data" / "tally.db").exists()  # the store is not created by a build


def test_a_failed_build_leaves_the_previous_file(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = build_warehouse(settings)
    before = first.path.read_bytes()
    broken = tmp_path / "models"
    broken.mkdir()
    (broken / "stg_broken.sql").write_text("select * from no_such_table\n")
    with pytest.raises(WarehouseBuildError, match="stg_broken"):
        build_warehouse(settings, models_dir=broken)
    assert first.path.read_bytes() == before
    assert sorted(p.name for p in first.path.parent.iterdir()) == ["warehouse.duckdb"]
