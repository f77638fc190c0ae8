"""A batch killed with SIGKILL in the middle of its run leaves the previous baseline served, and
the re-run succeeds with the oracle's counts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer import run_batch
from counting import oracle
from counting.event import Event, parse_event, stamped
from counting.settings import Settings
from counting.traffic import TrafficConfig, generate
from tally.stack import settings_env
from tests.writers import archived_until
from warehouse.baseline import current_baseline

pytestmark = [pytest.mark.slow, pytest.mark.integration]
WriteLog = Callable[[Path, Sequence[Event]], None]


def _log(start_ms: int) -> list[Event]:
    config = TrafficConfig(seed=5, videos=20, events=4_000, rate=200.0, start_ms=start_ms, bot_fraction=0.1)
    events = []
    for item in generate(config):
        sent = start_ms + item.send_at_ms
        raw = msgspec.json.encode(item.event)
        events.append(stamped(parse_event(raw, sent), sent))
    return events


def test_killed_run_keeps_the_old_baseline_and_the_rerun_succeeds(
    settings: Settings, redis_client: redis.Redis, write_log: WriteLog, spark: SparkSession
) -> None:
    start = (time.time_ns() // 1_000_000 // settings.bucket_ms - 20 * 60 // 2) * settings.bucket_ms
    events = _log(start)
    write_log(settings.raw_dir, events)
    last = max(e.ingest_ts or 0 for e in events)
    stamps = sorted(e.ingest_ts or 0 for e in events)
    first_cutoff = stamps[len(stamps) // 2] // settings.bucket_ms * settings.bucket_ms
    final_cutoff = (last // settings.bucket_ms + 1) * settings.bucket_ms
    archived_until(settings, final_cutoff)
    old = run_batch(settings, first_cutoff, spark=spark)

    child = subprocess.Popen(
        [sys.executable, "-m", "batch_layer", "--cutoff", str(final_cutoff), "--run-id", "killed"],
        env=settings_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    output = settings.batch_dir / "killed"
    deadline = time.monotonic() + 120
    while not output.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert output.exists() and child.poll() is None, "the run must be killed while it writes"
    os.killpg(child.pid, signal.SIGKILL)
    child.wait(30)

    served = current_baseline(settings.baselines_dir)
    assert served is not None
    assert (served.run_id, served.cutoff) == (old.run_id, first_cutoff)
    assert (
        served.get(events[0].video_id).views == oracle.count(events, first_cutoff)[events[0].video_id].views
    )

    rerun = run_batch(settings, final_cutoff, run_id="killed", spark=spark)
    served = current_baseline(settings.baselines_dir)
    assert served is not None and (served.run_id, served.cutoff) == (rerun.run_id, final_cutoff)
    truth = oracle.count(events, final_cutoff)
    assert {v: r.views for v, r in served.rows.items()} == {v: c.views for v, c in truth.items()}
