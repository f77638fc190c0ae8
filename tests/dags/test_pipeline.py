"""The DAG tasks' bodies (`tally.pipeline`) on their own: cutoffs, waiting, publishing only
forward, expiring speed buckets, and the spark-submit command line."""

from __future__ import annotations

import time
import zipfile
from dataclasses import asdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer.errors import BatchError, CutoffNotOnBucketEdge
from counting import keys
from counting.event import Event
from counting.settings import Settings, settings_env
from tally import pipeline, submit
from tests.logfiles import oracle_rows
from tests.speed_layer.helpers import BROWSER
from tests.writers import Writers, archived_until, closed_bucket, writers
from warehouse.baseline import current_baseline

DAY = datetime(2026, 11, 20, tzinfo=UTC)
DAY_MS = int(DAY.timestamp() * 1000)


def test_the_cutoff_is_the_interval_end_on_a_bucket_edge(settings: Settings) -> None:
    assert pipeline.interval_cutoff(DAY, settings) == DAY_MS
    with pytest.raises(CutoffNotOnBucketEdge, match="bucket edge"):
        pipeline.interval_cutoff(datetime(2026, 11, 20, 0, 0, 1, tzinfo=UTC), settings)
    assert pipeline.interval_run_id(DAY_MS) == f"interval-{DAY_MS}"


def test_a_run_without_an_interval_ends_at_the_last_bucket_edge_before_its_trigger(
    settings: Settings,
) -> None:
    triggered = datetime(2026, 11, 20, 0, 0, 3, 500_000, tzinfo=UTC)
    assert pipeline.run_cutoff(settings, None, triggered) == DAY_MS + 2_000
    assert pipeline.run_cutoff(settings, DAY, triggered) == DAY_MS


def test_waiting_ends_once_the_watermark_closes_the_cutoff(
    settings: Settings, redis_client: redis.Redis
) -> None:
    assert pipeline.wait_for_cutoff(settings, DAY_MS) is False  # no watermark yet
    archived_until(settings, DAY_MS - 1)
    assert pipeline.wait_for_cutoff(settings, DAY_MS) is False
    archived_until(settings, DAY_MS + 500)
    assert pipeline.wait_for_cutoff(settings, DAY_MS) is True


def test_a_recompute_ends_at_its_last_day_or_the_watermark(
    settings: Settings, redis_client: redis.Redis
) -> None:
    archived_until(settings, DAY_MS + 3 * 86_400_000 + 1_500)
    span = pipeline.recompute_bounds(settings, date(2026, 11, 19), date(2026, 11, 20))
    assert span == {
        "since": DAY_MS - 86_400_000,
        "cutoff": DAY_MS + 86_400_000,
        "run_id": f"recompute-{DAY_MS + 86_400_000}",
    }
    open_ended = pipeline.recompute_bounds(settings, date(2026, 11, 19), None)
    assert open_ended["cutoff"] == DAY_MS + 3 * 86_400_000  # the watermark, down to a bucket edge
    with pytest.raises(BatchError, match="nothing to recompute"):
        pipeline.recompute_bounds(settings, date(2026, 11, 25), None)


@pytest.mark.slow
@pytest.mark.integration
def test_publishing_never_moves_the_served_baseline_back(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    first = closed_bucket(settings) - 2  # the archiver's watermark passes the edge of first + 4
    views = [
        _counted_view("vid-1", f"viewer-{b}", b * settings.bucket_ms + 1) for b in range(first, first + 3)
    ]
    early, middle, late = ((first + n) * settings.bucket_ms for n in (1, 2, 3))
    with writers(settings, spark=lambda: spark) as tally:
        tally.ingest(views)
        tally.archive()

        def computed(cutoff: int) -> dict[str, Any]:
            """The interval's batch run, computed aside as the DAG's `compute` leaves it."""
            return asdict(tally.batch(cutoff, run_id=pipeline.interval_run_id(cutoff), publish=False))

        assert pipeline.publish(settings, computed(middle)) is True
        assert pipeline.publish(settings, computed(early)) is False
        served = current_baseline(settings.baselines_dir)
        assert served is not None and served.run_id == pipeline.interval_run_id(middle)
        assert served.rows == oracle_rows(views, middle)

        later = computed(late)
        assert pipeline.publish(settings, later) is True
        assert pipeline.publish(settings, later) is True  # a re-run republishes
    served = current_baseline(settings.baselines_dir)
    assert served is not None and (served.run_id, served.cutoff) == (pipeline.interval_run_id(late), late)
    assert served.rows == oracle_rows(views, late)


def _counted_view(video: str, user: str, ingest_ts: int) -> Event:
    return Event(
        event_id=f"{video}-{user}-{ingest_ts}",
        type="view",
        video_id=video,
        ts=ingest_ts,
        user_id=user,
        session_id=f"s-{user}",
        watch_secs=90.0,
        video_duration_secs=600.0,
        user_agent=BROWSER,
        ingest_ts=ingest_ts,
    )


def test_expiry_deletes_only_buckets_older_than_the_retention(
    settings: Settings, redis_client: redis.Redis
) -> None:
    settings = settings.model_copy(update={"retention_ms": 60_000})
    first = int(time.time() * 1000) // settings.bucket_ms
    old, kept = [first, first + 1], [first + 40, first + 45]  # kept: newer than `now` - retention
    now = (first + 40) * settings.bucket_ms + settings.retention_ms
    writers = Writers(settings)
    try:
        for bucket in old + kept:
            at = bucket * settings.bucket_ms + 1
            writers.ingest([_counted_view(video, f"viewer-{bucket}", at) for video in ("vid-1", "vid-2")])
        writers.count()
    finally:
        writers.close()
    written = [keys.bucket_counts(v, b) for v in ("vid-1", "vid-2") for b in old + kept]
    assert all(redis_client.exists(key) for key in written), "the counter wrote every bucket"

    doomed = [
        key(v, b)
        for v in ("vid-1", "vid-2")
        for b in old
        for key in (keys.bucket_counts, keys.viewers_sketch, keys.bucket_parts)  # parts: state counter
    ] + [keys.trending(b) for b in old]
    present = sum(int(redis_client.exists(key)) for key in doomed)
    assert present >= 2 * 2 * 2 + 2  # at least counts and sketches, and trending, whichever counter
    assert pipeline.expire_speed_buckets(settings, now) == present
    assert pipeline.expire_speed_buckets(settings, now) == 0

    for video in ("vid-1", "vid-2"):
        assert [int(b) for b in redis_client.zrange(keys.buckets_index(video), 0, -1)] == kept
        assert all(redis_client.exists(keys.bucket_counts(video, b)) for b in kept)
        assert not any(redis_client.exists(keys.viewers_sketch(video, b)) for b in old)
    assert not any(redis_client.exists(keys.trending(b)) for b in old)
    assert all(redis_client.exists(keys.trending(b)) for b in kept)


def test_the_settings_travel_as_environment_variables(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = settings_env(settings)
    assert Path(env["TALLY_DATA_DIR"]).is_absolute()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings() == settings.model_copy(update={"data_dir": settings.data_dir.resolve()})


def test_spark_submit_ships_the_packages_and_runs_this_module(settings: Settings, tmp_path: Path) -> None:
    cluster = settings.model_copy(update={"spark_master": "spark://spark-master:7077"})
    bundle = submit.bundle_packages(tmp_path)
    command = submit.spark_submit_command(cluster, DAY_MS, f"interval-{DAY_MS}", bundle)

    assert command[0].endswith("spark-submit")
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    assert command[command.index("--py-files") + 1] == str(bundle)
    assert command[-6:] == [
        pipeline.__file__,
        "--cutoff",
        str(DAY_MS),
        "--run-id",
        f"interval-{DAY_MS}",
        "--payouts",  # computed in the same session, kept aside until the run is published
    ]
    names = zipfile.ZipFile(bundle).namelist()
    assert {"batch_layer/job.py", "counting/rules.py", "warehouse/baseline.py"} <= set(names)
