"""The batch DAG end to end with `dag.test()` on small generated traffic: a clean interval moves the
served baseline to the interval's end (equal to the oracle); a corrupt raw partition fails the run
at validation and the previous baseline stays served."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from pyspark.sql import SparkSession

from counting import keys
from counting.event import Event, event_from_dict, stamped
from counting.settings import Settings
from counting.traffic import TrafficConfig, catalog_rows, generate
from tally import pipeline
from tests.logfiles import hour_folder, log_rows, oracle_rows, write_rows
from tests.speed_layer.helpers import BROWSER
from tests.writers import writers
from warehouse.baseline import current_baseline
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


def _views_long_ago(video: str, bucket: int, bucket_ms: int) -> list[Event]:
    """A few views of `video` that pass every rule, ingested in one bucket (stamped as the log has
    them)."""
    return [
        Event(
            event_id=f"long-ago-{bucket}-{i}",
            type="view",
            video_id=video,
            ts=bucket * bucket_ms + 100 * i,
            user_id=f"long-ago-user-{i}",
            session_id=f"long-ago-session-{i}",
            ip=f"81.2.60.{i + 1}",
            user_agent=BROWSER,
            watch_secs=60.0,
            video_duration_secs=120.0,
            ingest_ts=bucket * bucket_ms + 100 * i + 50,
        )
        for i in range(3)
    ]


def _speed_buckets(client: redis.Redis) -> dict[str, list[int]]:
    """Each video's buckets in the speed layer's index (what the counter wrote, less expired ones)."""
    found = {}
    for raw in client.smembers(keys.videos_index()):
        video = cast(bytes, raw).decode()
        found[video] = [int(cast(bytes, b)) for b in client.zrange(keys.buckets_index(video), 0, -1)]
    return found


def _trending_buckets(client: redis.Redis) -> set[int]:
    """The buckets that have a trending set."""
    pattern = keys.trending(0).removesuffix("0") + "*"
    return {int(key.rsplit(b":", 1)[-1]) for key in client.scan_iter(match=pattern)}


def _moment(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _page_text(page: Path) -> str:
    """A data docs page as plain text."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text())))


def _states(run: Any) -> dict[str, str | None]:
    return {ti.task_id: (str(ti.state) if ti.state else None) for ti in run.get_task_instances()}


def test_a_clean_interval_moves_the_served_baseline_to_its_end(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 20, 4, tzinfo=UTC).timestamp() * 1000)
    previous_cutoff, cutoff = start + HOUR_MS, start + 2 * HOUR_MS
    config, traffic = _traffic(start, seed=5)
    assert max(e.ingest_ts or 0 for e in traffic) > previous_cutoff
    oldest_kept = (cutoff - settings.retention_ms) // settings.bucket_ms
    old = oldest_kept - 5
    video = catalog_rows(config)[0].video_id
    assert video in {e.video_id for e in traffic}
    events = [*traffic, *_views_long_ago(video, old, settings.bucket_ms)]
    migrate(settings.store_url)
    with open_store(settings.store_url) as store:
        upsert_catalog(store, catalog_rows(config))
    # The counter (real clock: every bucket expires a retention from now), the archiver's log and
    # watermark, and the previous interval's run, published.
    with writers(settings, spark=lambda: spark) as tally:
        tally.ingest(events)
        tally.count()
        tally.archive()
        tally.batch(previous_cutoff, run_id=pipeline.interval_run_id(previous_cutoff))
    written = _speed_buckets(redis_client)
    assert [b for buckets in written.values() for b in buckets if b < oldest_kept] == [old]
    old_keys = (keys.bucket_counts(video, old), keys.viewers_sketch(video, old), keys.trending(old))
    assert redis_client.exists(*old_keys) == 3
    trending = _trending_buckets(redis_client)
    assert old in trending

    dag = dag_bag.get_dag("tally_batch")
    for task in dag.tasks:
        task.retries = 0  # a failure here is a bug: show it at once
    run = dag.test(logical_date=_moment(cutoff))

    assert run.state == "success", _states(run)
    served = current_baseline(settings.baselines_dir)
    assert served is not None
    assert (served.run_id, served.cutoff) == (f"interval-{cutoff}", cutoff)
    assert served.rows == oracle_rows(events, cutoff)
    assert not redis_client.exists(*old_keys)
    kept = {v: [b for b in buckets if b != old] for v, buckets in written.items()}
    assert _speed_buckets(redis_client) == kept
    assert all(redis_client.exists(keys.bucket_counts(v, b)) for v, buckets in kept.items() for b in buckets)
    assert _trending_buckets(redis_client) == trending - {old}
    pages = list((settings.quality_dir / "gx").rglob("validations/*/*/*/*.html"))
    assert {page.parts[-4] for page in pages} == {"raw_log", "batch_baseline", "batch_daily"}


def test_a_corrupt_partition_fails_at_validation_and_the_previous_baseline_stays(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    settings = tally_env
    start = int(datetime(2026, 11, 21, 9, tzinfo=UTC).timestamp() * 1000)
    previous_cutoff, cutoff = start + HOUR_MS, start + 2 * HOUR_MS
    _, events = _traffic(start, seed=6)
    with writers(settings, spark=lambda: spark) as tally:  # the log, the watermark, the previous run
        tally.ingest(events)
        tally.archive()
        tally.batch(previous_cutoff, run_id=pipeline.interval_run_id(previous_cutoff))
    # A file no archiver wrote, planted on purpose: the validation must catch it.
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
    downstream = (
        "compute",
        "validate_outputs",
        "publish",
        "write_payouts",
        "announce_milestones",
        "compact_log",
        "build_warehouse",
    )
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


def test_the_sensor_pokes_again_two_graces_after_the_interval_ends(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hourly buckets, a 5 s grace: a first poke at the interval's end finds the cutoff not closed
    yet, the next comes 10 s later (it came a minute later: a minute lost every run)."""
    import runpy

    from tally.airflow import DAGS_FOLDER

    def poke_seconds(bucket_ms: str, grace_ms: str) -> float:
        monkeypatch.setenv("TALLY_BUCKET_MS", bucket_ms)
        monkeypatch.setenv("TALLY_DELIVERY_TIMEOUT_MS", grace_ms)
        return float(runpy.run_path(str(DAGS_FOLDER / "tally_batch.py"))["POKE_SECONDS"])

    assert poke_seconds("3600000", "5000") == 10.0
    assert poke_seconds("2000", "5000") == 2.0  # at most once a bucket
    assert poke_seconds("3600000", "300") == 1.0  # at least once a second
    assert poke_seconds("3600000", "600000") == 60.0  # at most once a minute


def test_a_run_that_reads_no_event_publishes_nothing(
    dag_bag: Any, tally_env: Settings, redis_client: redis.Redis
) -> None:
    """An empty log up to the cutoff: the DAG computes, finds no event, and skips publishing (as
    `tally batch run` refuses it without --force) instead of serving zeros."""
    from tests.writers import archived_until

    settings = tally_env
    cutoff = int(datetime(2026, 11, 21, 5, tzinfo=UTC).timestamp() * 1000)
    archived_until(settings, cutoff)
    dag = dag_bag.get_dag("tally_batch")

    run = dag.test(logical_date=datetime.fromtimestamp(cutoff / 1000, tz=UTC))

    states = _states(run)
    assert (states["compute"], states["publish"]) == ("success", "skipped"), states
    skipped = ("write_payouts", "announce_milestones", "compact_log", "build_warehouse")
    assert {states[t] for t in skipped} == {"skipped"}
    assert current_baseline(settings.baselines_dir) is None
