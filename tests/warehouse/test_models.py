"""Each warehouse model on a tiny build: a hive-layout log, a published baseline, a run's daily
outputs and a SQLite store, with every expectation written out by hand."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from counting import oracle
from counting.event import Event
from counting.logschema import LOG_COLUMNS
from counting.settings import Settings
from warehouse import tables
from warehouse.baseline import BaselineRow, baseline_schema, publish_baseline, rows_table, write_table
from warehouse.build import BuildReport, build_warehouse
from warehouse.errors import WarehouseBuildError
from warehouse.models import MODELS_DIR, load_models

RUN = "20261121T000000-c1795305600000-abc123"
OLD_RUN = "20261120T000000-c1795219200000-def456"
DAY1 = 1_795_046_400_000  # 2026-11-19T00:00Z
DAY2 = DAY1 + 86_400_000
CUTOFF = DAY2 + 86_400_000
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
_ARROW = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}
LOG_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in LOG_COLUMNS])


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
    hour = 3_600_000
    return [
        _view(1, "v1", DAY1 + hour, "alice"),
        _view(2, "v1", DAY1 + 2 * hour, "bob"),
        _view(3, "v1", DAY2 + hour, "alice"),
        _view(4, "v2", DAY1 + hour, "carol"),
        _view(5, "v2", DAY1 + hour + 1, "dave", user_agent="python-requests/2.31"),
        _view(6, "v2", DAY2 + hour, "erin", ip="52.1.2.3", ja3="3b5074b1b5d032e5620f69f9f700ff0e"),
        _view(7, "v3", DAY2 + 3 * hour, "frank", watch_secs=10.0),
        Event(
            event_id="e8",
            type="like",
            video_id="v1",
            ts=DAY1 + hour,
            user_id="alice",
            ingest_ts=DAY1 + hour + 9,
        ),
        Event(
            event_id="e9",
            type="dislike",
            video_id="v2",
            ts=DAY1 + hour,
            user_id="bob",
            ingest_ts=DAY1 + hour + 9,
        ),
    ]


def _write_log(raw_dir: Path, events: Sequence[Event]) -> int:
    """The events as the archiver files them, plus one retry copy in another file: the rows written."""
    rows = []
    for offset, event in enumerate(events):
        row: dict[str, Any] = {name: None for name, _ in LOG_COLUMNS}
        row.update(msgspec.structs.asdict(event), kafka_partition=0, kafka_offset=offset)
        rows.append(row)
    rows.append({**rows[0], "ingest_ts": rows[0]["ingest_ts"] + 1_000, "kafka_offset": len(rows)})
    for row in rows:
        moment = dt.datetime.fromtimestamp(row["ingest_ts"] / 1000, tz=dt.UTC)
        folder = raw_dir / f"ingest_date={moment:%Y-%m-%d}" / f"ingest_hour={moment:%H}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"events-p0-{row['kafka_offset']:012d}-{row['kafka_offset']:012d}.parquet"
        pq.write_table(pa.Table.from_pylist([row], schema=LOG_SCHEMA), folder / name)
    return len(rows)


def _daily(video: str, day: dt.date, **counts: int) -> dict[str, Any]:
    row: dict[str, Any] = {"date": day, **dict.fromkeys(baseline_schema().names[1:], 0)}
    row.update(video_id=video, run_id=RUN, rules_version="2026.11.1", **counts)
    return row


D1, D2 = dt.date(2026, 11, 19), dt.date(2026, 11, 20)
DAILY = [
    _daily("v1", D1, views=2, unique_viewers=2, likes=1),
    _daily("v1", D2, views=1, unique_viewers=1),
    _daily("v2", D1, views=1, unique_viewers=1, dislikes=1, rejected_scripted_agent=1),
    _daily("v2", D2, rejected_datacenter_ip=1),
    _daily("v3", D2, short_views=1),
]


def _write_daily(settings: Settings) -> None:
    schema = pa.schema(
        [("date", pa.date32()), *baseline_schema(), ("run_id", pa.string()), ("rules_version", pa.string())]
    )
    folder = settings.batch_dir / RUN / "daily_video"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(DAILY, schema=schema), folder / "part-00000.parquet")


def _write_baseline(settings: Settings, events: Sequence[Event]) -> None:
    rows = [
        BaselineRow(
            video, c.views, c.likes, c.dislikes, c.unique_viewers, c.short_views, c.repeat_views, c.rejected
        )
        for video, c in oracle.count(events, CUTOFF).items()
    ]
    write_table(settings.baselines_dir / RUN / "baseline.parquet", rows_table(rows))
    publish_baseline(settings.baselines_dir, RUN, CUTOFF, "2026.11.1", published_at=CUTOFF + 60_000)


def _write_store(settings: Settings) -> None:
    engine = sa.create_engine(settings.store_url)
    tables.metadata.create_all(engine)
    at = dt.datetime(2026, 11, 21, 1, 0, tzinfo=dt.UTC)
    day_before = at - dt.timedelta(days=1)
    ledger = {
        "rate_per_1000": Decimal("2.000000"),
        "currency": "USD",
        "input_files": {"ingest_date=2026-11-19/ingest_hour=01/a.parquet": "ab" * 32},
        "rules_version": "2026.11.1",
    }
    with engine.begin() as connection:
        connection.execute(
            sa.insert(tables.videos),
            [
                {"video_id": "v1", "creator_id": "c1", "duration_secs": 120.0, "monetized": True},
                {"video_id": "v2", "creator_id": "c1", "duration_secs": 120.0, "monetized": False},
                {"video_id": "v3", "creator_id": "c2", "duration_secs": 30.0, "monetized": True},
            ],
        )
        for run_id, when in ((OLD_RUN, at - dt.timedelta(days=1)), (RUN, at)):
            connection.execute(
                sa.insert(tables.batch_runs),
                {
                    "run_id": run_id,
                    "cutoff": CUTOFF,
                    "rules_version": "2026.11.1",
                    "started_at": when,
                    "finished_at": when,
                    "status": "succeeded",
                    "events_read": 10,
                    "input_files": {},
                    "published_at": when,
                    "allow_decrease_reason": "removed a replayed file" if run_id == RUN else None,
                },
            )
        connection.execute(
            sa.insert(tables.payout_ledger),
            [
                # the old run saw one view on day 1; the current run corrects it to two
                {**ledger, "creator_id": "c1", "day": D1, "run_id": OLD_RUN, "monetizable_views": 1,
                 "amount": Decimal("0.002000"), "counted_ids_digest": "0" * 64, "created_at": day_before},
                {**ledger, "creator_id": "c1", "day": D1, "run_id": RUN, "monetizable_views": 2,
                 "amount": Decimal("0.004000"), "counted_ids_digest": "1" * 64, "created_at": at},
                {**ledger, "creator_id": "c1", "day": D2, "run_id": RUN, "monetizable_views": 1,
                 "amount": Decimal("0.002000"), "counted_ids_digest": "2" * 64, "created_at": at},
            ],
        )  # fmt: skip
    engine.dispose()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[BuildReport, int]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("warehouse") / "data")
    events = _events()
    written = _write_log(settings.raw_dir, events)
    _write_daily(settings)
    _write_baseline(settings, events)
    _write_store(settings)
    return build_warehouse(settings), written


def _query(report: BuildReport, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(report.path), read_only=True) as con:
        return con.execute(sql).fetchall()


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


def test_stg_events_has_every_log_row_typed(built: tuple[BuildReport, int]) -> None:
    report, written = built
    rows = _query(
        report,
        "select count(*), count(distinct event_id), min(event_time), min(ingest_date), max(ingest_hour) "
        "from stg_events",
    )
    assert rows == [(written, 9, dt.datetime(2026, 11, 19, 1, 0), dt.date(2026, 11, 19), 3)]
    assert report_rows(report, "stg_events") == written


def report_rows(report: BuildReport, name: str) -> int:
    return next(m.rows for m in report.models if m.name == name)


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


def test_store_staging_models_copy_the_store(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    assert _query(report, "select video_id, creator_id, monetized from stg_videos order by 1") == [
        ("v1", "c1", True),
        ("v2", "c1", False),
        ("v3", "c2", True),
    ]
    assert _query(report, "select count(*), sum(amount) from stg_payout_ledger") == [(3, Decimal("0.008000"))]
    assert report.sources == {"raw_videos": 3, "raw_payout_ledger": 3, "raw_batch_runs": 2}
    runs = _query(
        report,
        "select run_id, cutoff, status, allow_decrease_reason, skip_validation, forced "
        "from stg_batch_runs order by run_id",
    )
    assert runs == [
        (OLD_RUN, CUTOFF, "succeeded", None, False, False),
        (RUN, CUTOFF, "succeeded", "removed a replayed file", False, False),
    ]


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


def test_mart_top_videos(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(report, "select rank, video_id, creator_id, views, like_ratio, as_of from mart_top_videos")
    as_of = dt.datetime(2026, 11, 21, 0, 0)
    assert rows == [
        (1, "v1", "c1", 3, Decimal("1.0"), as_of),
        (2, "v2", "c1", 1, Decimal("0.0"), as_of),
        (3, "v3", "c2", 0, None, as_of),
    ]


def test_mart_rejected_by_reason_day(built: tuple[BuildReport, int]) -> None:
    report, _ = built
    rows = _query(
        report, "select date, reason, rejected_views, videos, share_of_day from mart_rejected_by_reason_day"
    )
    assert [r[:4] for r in rows] == [(D1, "scripted_agent", 1, 1), (D2, "datacenter_ip", 1, 1)]
    assert [float(r[4]) for r in rows] == [1.0, 1.0]


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
    assert reasons == [("removed a replayed file",)]


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
