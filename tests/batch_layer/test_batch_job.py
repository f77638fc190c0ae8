"""The batch job around the transform: refused cutoffs, empty logs, failed runs, the entry point."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer import (
    BatchError,
    CutoffNotClosed,
    CutoffNotOnBucketEdge,
    InvalidRunId,
    WatermarkUnavailable,
    run_batch,
)
from batch_layer.job import main
from counting import keys
from counting.event import Event
from counting.settings import Settings
from tests.writers import archived_until
from warehouse.baseline import current_baseline

WriteLog = Callable[[Path, Sequence[Event]], None]

CUTOFF = 1_795_000_000_000  # on a 2-second bucket edge


def _view(event_id: str, ingest_ts: int, video_id: str = "v1") -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id=video_id,
        ts=ingest_ts - 10,
        user_id=f"u-{event_id}",
        session_id="s",
        watch_secs=60.0,
        ingest_ts=ingest_ts,
    )


@pytest.mark.integration
def test_a_cutoff_off_a_bucket_edge_is_refused(settings: Settings, redis_client: redis.Redis) -> None:
    archived_until(settings, CUTOFF * 2)
    with pytest.raises(
        CutoffNotOnBucketEdge, match=r"got 1795000000001; the edges around it are 1795000000000"
    ):
        run_batch(settings, CUTOFF + 1)
    assert current_baseline(settings.baselines_dir) is None


@pytest.mark.integration
def test_an_unclosed_cutoff_is_refused(settings: Settings, redis_client: redis.Redis) -> None:
    archived_until(settings, CUTOFF - 2_000)
    with pytest.raises(
        CutoffNotClosed, match=r"cutoff 1795000000000 is not closed.*watermark is 1794999998000"
    ):
        run_batch(settings, CUTOFF)
    assert current_baseline(settings.baselines_dir) is None


@pytest.mark.integration
def test_a_missing_or_garbled_watermark_is_refused(settings: Settings, redis_client: redis.Redis) -> None:
    with pytest.raises(WatermarkUnavailable, match="has not published one yet"):
        run_batch(settings, CUTOFF)
    redis_client.set(keys.archiver_watermark(), "soon")  # deliberately garbled: the error under test
    with pytest.raises(WatermarkUnavailable, match="not an integer"):
        run_batch(settings, CUTOFF)


def test_an_unreachable_redis_says_what_to_do(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, bucket_ms=2_000, redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(WatermarkUnavailable, match="start it with 'tally up' or set TALLY_REDIS_URL"):
        run_batch(settings, CUTOFF)


@pytest.mark.slow
@pytest.mark.integration
def test_no_log_yet_publishes_an_empty_baseline(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    archived_until(settings, CUTOFF)
    result = run_batch(settings, CUTOFF, spark=spark)
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None
    assert (baseline.cutoff, baseline.rows, result.events_read, result.videos) == (CUTOFF, {}, 0, 0)


@pytest.mark.slow
@pytest.mark.integration
def test_a_failed_run_leaves_the_previous_baseline_serving(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession, write_log: WriteLog
) -> None:
    archived_until(settings, CUTOFF)
    write_log(settings.raw_dir, [_view("a", CUTOFF - 5_000), _view("b", CUTOFF - 4_000), _view("c", CUTOFF)])
    first = run_batch(settings, CUTOFF - 4_000, spark=spark)
    # A file the archiver did not finish properly: the next run cannot read the log.
    broken = next(settings.raw_dir.rglob("*.parquet")).parent / "events-9-00000.parquet"
    broken.write_bytes(b"PAR1 not really parquet")

    with pytest.raises(BatchError, match=f"run 'second' at cutoff {CUTOFF} failed"):
        run_batch(settings, CUTOFF, run_id="second", spark=spark)

    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None
    assert (baseline.run_id, baseline.cutoff, set(baseline.rows)) == (first.run_id, CUTOFF - 4_000, {"v1"})
    assert baseline.rows["v1"].views == 1
    assert not (settings.baselines_dir / "second").exists()


def test_a_run_id_must_be_a_plain_name(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, bucket_ms=2_000)
    with pytest.raises(InvalidRunId, match=r"got '../escape'"):
        run_batch(settings, CUTOFF, run_id="../escape")


def test_main_reports_a_refused_cutoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TALLY_DATA_DIR", str(tmp_path))
    assert main(["--cutoff", "1001"]) == 2
    assert "cutoff must be on a bucket edge" in capsys.readouterr().err
