"""Payouts: per creator and UTC day of event time, counted views of monetized videos times the rate,
equal to the oracle's counts; rewriting a run's payouts is idempotent."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import msgspec
import pyarrow.parquet as pq
import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer.errors import PayoutsUnavailable
from batch_layer.job import compute_batch
from batch_layer.payouts import (
    compute_payouts,
    load_computed_payouts,
    payout_amount,
    run_payouts,
)
from counting import oracle, rules
from counting.batchpaths import creator_viewers_path, payout_events_path
from counting.bots import SHIPPED
from counting.catalog import CatalogRow
from counting.event import Event, parse_event, stamped
from counting.settings import Settings
from counting.traffic import TrafficConfig, catalog_rows, generate
from tests.writers import archived_until
from warehouse.migrate import migrate
from warehouse.store import catalog, ledger_rows, open_store, upsert_catalog
from warehouse.tables import file_digest, ids_digest

WriteLog = Callable[[Path, Sequence[Event]], None]

MIDNIGHT = int(datetime(2026, 6, 2, tzinfo=UTC).timestamp() * 1000)
# Bots included; sent from 20 minutes before a UTC midnight to about 25 minutes after it.
TRAFFIC = TrafficConfig(
    seed=5, videos=30, viewers=600, events=6_000, rate=2.0, bot_fraction=0.15, start_ms=MIDNIGHT - 1_200_000
)
CUTOFF = MIDNIGHT + 1_200_000
RATE = Decimal("1.2345")


def traffic_events(config: TrafficConfig) -> list[Event]:
    """The generated traffic as the log keeps it: validated and stamped at its send time."""
    encoder = msgspec.json.Encoder()
    events = []
    for item in generate(config):
        now = config.start_ms + item.send_at_ms
        events.append(stamped(parse_event(encoder.encode(item.event), now), now))
    return events


def oracle_views(
    events: Sequence[Event], cutoff: int, videos: Sequence[CatalogRow]
) -> dict[tuple[str, date], int]:
    """Per (creator, UTC day of ts), the oracle's counted views of monetized videos: `oracle.count`
    over each day's events (no counting window crosses a UTC day)."""
    by_day: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        by_day[rules.day_of(event.ts)].append(event)
    owners = {v.video_id: v.creator_id for v in videos if v.monetized}
    figures: dict[tuple[str, date], int] = defaultdict(int)
    for day, day_events in by_day.items():
        for video_id, counts in oracle.count(day_events, cutoff).items():
            if video_id in owners and counts.views:
                moment = datetime.fromtimestamp(day * rules.DAY_MS / 1000, tz=UTC)
                figures[(owners[video_id], moment.date())] += counts.views
    return dict(figures)


def payout_settings(tmp_path: Path) -> Settings:
    settings = Settings(data_dir=tmp_path / "data", payout_rate_per_1000_views=RATE, payout_currency="EUR")
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(TRAFFIC))
    return settings


def test_the_amount_is_rounded_half_to_even_to_six_places() -> None:
    assert payout_amount(1_000, Decimal("2.00")) == Decimal("2.000000")
    assert payout_amount(1, Decimal("0.0005")) == Decimal("0.000000")  # 0.0000005 -> even
    assert payout_amount(3, Decimal("0.0005")) == Decimal("0.000002")  # 0.0000015 -> even
    assert payout_amount(7, Decimal("1.2345")) == Decimal("0.008642")  # 0.0086415 -> even
    assert payout_amount(0, Decimal("2.00")) == Decimal("0")


@pytest.mark.slow
def test_ledger_amounts_equal_the_oracle_and_a_rewrite_changes_nothing(
    tmp_path: Path, spark: SparkSession, write_log: WriteLog
) -> None:
    settings = payout_settings(tmp_path)
    events = traffic_events(TRAFFIC)
    write_log(settings.raw_dir, events)
    expected = oracle_views(events, CUTOFF, catalog_rows(TRAFFIC))
    assert {day for _, day in expected} == {date(2026, 6, 1), date(2026, 6, 2)}  # both sides of midnight

    rows = run_payouts(settings, "run-1", CUTOFF, spark=spark)

    with open_store(settings.store_url) as store:
        ledger = [r for creator in sorted({c for c, _ in expected}) for r in ledger_rows(store, creator)]
    assert {(r.creator_id, r.day): r.monetizable_views for r in ledger} == expected
    for row in ledger:
        views = expected[(row.creator_id, row.day)]
        assert (row.run_id, row.rules_version, row.currency) == ("run-1", SHIPPED.version, "EUR")
        assert row.amount == (views * RATE / 1000).quantize(Decimal("0.000001"))
        assert row.input_files and all(
            file_digest(settings.raw_dir / path) == sha for path, sha in row.input_files.items()
        )
    detail = pq.read_table(payout_events_path(settings, "run-1")).to_pylist()
    ids: dict[tuple[str, date], list[str]] = defaultdict(list)
    for item in detail:
        ids[(item["creator_id"], date.fromisoformat(str(item["date"])))].append(item["event_id"])
    assert {key: len(found) for key, found in ids.items()} == expected
    assert all(r.counted_ids_digest == ids_digest(ids[(r.creator_id, r.day)]) for r in ledger)
    assert sorted((r.payout() for r in ledger), key=lambda r: (r.day, r.creator_id)) == rows

    again = run_payouts(settings, "run-1", CUTOFF, spark=spark)

    with open_store(settings.store_url) as store:
        rewritten = [r for creator in sorted({c for c, _ in expected}) for r in ledger_rows(store, creator)]
    assert again == rows
    assert [r.payout() for r in rewritten] == [r.payout() for r in ledger]


@pytest.mark.slow
@pytest.mark.integration
def test_a_run_computes_its_payouts_in_its_own_session_and_keeps_them_aside(
    tmp_path: Path, spark: SparkSession, write_log: WriteLog, redis_url: str, redis_client: redis.Redis
) -> None:
    settings = payout_settings(tmp_path).model_copy(update={"redis_url": redis_url, "bucket_ms": 60_000})
    archived_until(settings, CUTOFF)
    events = traffic_events(TRAFFIC)
    write_log(settings.raw_dir, events)
    with open_store(settings.store_url) as store:
        videos = catalog(store)

    result = compute_batch(settings, CUTOFF, run_id="run-1", spark=spark, videos=videos)

    kept = load_computed_payouts(settings, "run-1")
    assert result.payouts == len(kept)
    assert {(r.creator_id, r.day): r.monetizable_views for r in kept} == oracle_views(
        events, CUTOFF, catalog_rows(TRAFFIC)
    )
    assert kept == compute_payouts(spark, settings, "run-1", CUTOFF, videos)  # the separate path
    reach = pq.read_table(creator_viewers_path(settings, "run-1")).to_pylist()
    creators = {video_id: row.creator_id for video_id, row in videos.items()}
    truth = oracle.creator_counts(events, creators, CUTOFF)
    assert {r["creator_id"]: r["unique_viewers"] for r in reach} == {
        creator: c.unique_viewers for creator, c in truth.items() if c.unique_viewers
    }
    assert len(reach) > 1
    with open_store(settings.store_url) as store:
        assert all(ledger_rows(store, r.creator_id) == [] for r in kept)  # written after publish only
    with pytest.raises(PayoutsUnavailable, match="'run-2' has no computed payouts"):
        load_computed_payouts(settings, "run-2")
