"""The batch DAG end to end with `dag.test()` on small generated traffic: a clean interval moves the
served baseline to the interval's end (equal to the oracle); a corrupt raw partition fails the run
at validation and the previous baseline stays served."""

from __future__ import annotations

import html
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from counting import keys
from counting.event import Event, event_from_dict, stamped
from counting.rules import RULES_VERSION
from counting.settings import Settings
from counting.traffic import TrafficConfig, catalog_rows, generate
from tests.logfiles import WriteLog, hour_folder, log_rows, oracle_rows, write_rows
from warehouse.baseline import BaselineRow, current_baseline, publish_baseline, rows_table, write_table
from warehouse.migrate import migrate
from warehouse.store import open_store, upsert_catalog

# Airflow's standard provider imports a name Airflow itself deprecated (apache-airflow 3.3.0).
_AIRFLOW_OWN_DEPRECATION = (
    r"ignore:The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute is deprecated:FutureWarning"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings(_AIRFLOW_OWN_DEPRECATION),
    # Great Expectations 1.24 imports the deprecated `sre_constants` module.
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

HOUR_MS = 3_600_000


def _traffic(start_ms: int, seed: int) -> tuple[TrafficConfig, list[Event]]:
    """About two hours of traffic from `start_ms`, bots and retries included, as the log holds it."""
    config = TrafficConfig(
        seed=seed,
        videos=12,
        viewers=150,
        events=2_400,
        rate=0.35,
        start_ms=start_ms,
        bot_fraction=0.1,
        retry_rate=0.05,
        warm_start=False,
    )
    events = []
    for item in generate(config):
        ingest_ts = start_ms + item.send_at_ms
        events.append(stamped(event_from_dict(item.event, now_ms=ingest_ts), ingest_ts))
    return config, events


def _serve_baseline(settings: Settings, cutoff: int, rows: dict[str, BaselineRow]) -> None:
    """Publish a baseline as the run of the previous interval would have."""
    run_id = f"interval-{cutoff}"
    write_table(settings.baselines_dir / run_id / "baseline.parquet", rows_table(list(rows.values())))
    published_at = int(time.time() * 1000)
    publish_baseline(settings.baselines_dir, run_id, cutoff, RULES_VERSION, published_at=published_at)


def _moment(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _page_text(page: Path) -> str:
    """A data docs page as plain text."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text())))


def _states(run: Any) -> dict[str, str | None]:
    return {ti.task_id: (str(ti.state) if ti.state else None) for ti in run.get_task_instances()}


def test_a_clean_interval_moves_the_served_baseline_to_its_end(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 20, 4, tzinfo=UTC).timestamp() * 1000)
    previous_cutoff, cutoff = start + HOUR_MS, start + 2 * HOUR_MS
    config, events = _traffic(start, seed=5)
    assert max(e.ingest_ts or 0 for e in events) > previous_cutoff
    write_log(settings.raw_dir, events)
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(config))
    _serve_baseline(settings, previous_cutoff, oracle_rows(events, previous_cutoff))
    redis_client.set(keys.archiver_watermark(), cutoff)
    old = (cutoff - settings.retention_ms) // settings.bucket_ms - 5
    fresh = cutoff // settings.bucket_ms - 1
    for bucket in (old, fresh):
        redis_client.hset(keys.bucket_counts("vid-x", bucket), "views", 1)
        redis_client.zadd(keys.buckets_index("vid-x"), {str(bucket): bucket})
        redis_client.zadd(keys.trending(bucket), {"vid-x": 1})
    redis_client.sadd(keys.videos_index(), "vid-x")

    dag = dag_bag.get_dag("tally_batch")
    for task in dag.tasks:
        task.retries = 0  # a failure here is a bug: show it at once
    run = dag.test(logical_date=_moment(cutoff))

    assert run.state == "success", _states(run)
    served = current_baseline(settings.baselines_dir)
    assert served is not None
    assert (served.run_id, served.cutoff) == (f"interval-{cutoff}", cutoff)
    assert served.rows == oracle_rows(events, cutoff)
    assert not redis_client.exists(keys.bucket_counts("vid-x", old), keys.trending(old))
    assert redis_client.exists(keys.bucket_counts("vid-x", fresh), keys.trending(fresh)) == 2
    assert redis_client.zrange(keys.buckets_index("vid-x"), 0, -1) == [str(fresh).encode()]
    pages = list((settings.quality_dir / "gx").rglob("validations/*/*/*/*.html"))
    assert {page.parts[-4] for page in pages} == {"raw_log", "batch_baseline", "batch_daily"}


def test_a_corrupt_partition_fails_at_validation_and_the_previous_baseline_stays(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, write_log: WriteLog
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 21, 9, tzinfo=UTC).timestamp() * 1000)
    previous_cutoff, cutoff = start + HOUR_MS, start + 2 * HOUR_MS
    _, events = _traffic(start, seed=6)
    write_log(settings.raw_dir, events)
    _serve_baseline(settings, previous_cutoff, oracle_rows(events, previous_cutoff))
    redis_client.set(keys.archiver_watermark(), cutoff)
    good = [e for e in events if previous_cutoff <= (e.ingest_ts or 0) < cutoff][:3]
    bad = log_rows(good, first_offset=90_000)
    bad[0]["event_id"] = None
    bad[1].update(type="view", watch_secs=-5.0)
    bad[2]["ts"] = int(str(bad[2]["ingest_ts"])) + 3 * 24 * HOUR_MS
    write_rows(hour_folder(settings.raw_dir, previous_cutoff), "events-p0-corrupt.parquet", bad)

    run = dag_bag.get_dag("tally_batch").test(logical_date=_moment(cutoff))

    states = _states(run)
    assert run.state == "failed", states
    assert states["validate_raw"] == "failed"
    [validation] = [ti for ti in run.get_task_instances() if ti.task_id == "validate_raw"]
    assert validation.try_number == 1  # failed validations are not retried
    downstream = ("compute", "validate_outputs", "publish", "write_payouts", "build_warehouse")
    assert {states[task] for task in downstream} == {"upstream_failed"}
    served = current_baseline(settings.baselines_dir)
    assert served is not None
    assert (served.run_id, served.cutoff) == (f"interval-{previous_cutoff}", previous_cutoff)
    assert not (settings.batch_dir / f"interval-{cutoff}").exists()
    pages = list((settings.quality_dir / "gx").rglob("validations/raw_log/*/*/*.html"))
    assert len(pages) == 1
    text = _page_text(pages[0])
    assert "Status: Failed" in text
    assert "watch_secs is a number of seconds >= 0 1 unexpected values found" in text
    assert "event_id is present 1 unexpected values found" in text
    assert (settings.quality_dir / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html").exists()

    recompute = dag_bag.get_dag("tally_recompute").test(run_conf={"start": "2026-11-21"})

    states = _states(recompute)
    assert recompute.state == "failed", states
    assert (states["bounds"], states["validate_raw"], states["compute"]) == (
        "success",
        "failed",
        "upstream_failed",
    )
    served = current_baseline(settings.baselines_dir)
    assert served is not None and served.run_id == f"interval-{previous_cutoff}"
