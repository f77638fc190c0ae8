"""Workers killed with SIGKILL at random moments and restarted on the same consumer group: the
counter's counts still equal the oracle exactly (on a single Redis and on a Redis Cluster), and the
Parquet log holds every event once."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import redis

from counting import keys, oracle
from counting.event import Event
from counting.settings import Settings
from tally.topics import ensure_topics
from tests.speed_layer.helpers import (
    OnRedis,
    Traffic,
    WorkerProcess,
    produce_events,
    speed_counts,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]
KILLS = 5
# A killed member holds its partitions until the broker expires its session: keep it short here.
SESSION = ("--session-timeout", "4")


@pytest.fixture
def crash_settings(settings: Settings, broker: str) -> Settings:
    configured = settings.model_copy(
        update={
            "kafka_bootstrap": broker,
            "topic_partitions": 3,
            "counter_flush_ms": 50,
            "archiver_flush_ms": 100,
        }
    )
    ensure_topics(configured)
    return configured


def _stored(client: redis.Redis, settings: Settings) -> int:
    """Records the counter has stored (sum over partitions of the stored offset + 1)."""
    names = [keys.counter_offset(settings.events_topic, p) for p in range(settings.topic_partitions)]
    return sum(int(v) + 1 for v in (client.get(name) for name in names) if v is not None)  # type: ignore[arg-type]


def _log_rows(raw_dir: Path) -> list[dict[str, object]]:
    if not raw_dir.exists() or not any(raw_dir.rglob("*.parquet")):
        return []
    return ds.dataset(raw_dir, format="parquet", partitioning="hive").to_table().to_pylist()


def _kill(worker: WorkerProcess) -> None:
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait(10)


def _run_with_kills(
    start: Callable[[], WorkerProcess],
    settings: Settings,
    progress: Callable[[], int],
    seed: int,
) -> tuple[list[Event], WorkerProcess, int]:
    """Produce traffic in chunks while the worker runs; kill it at random moments once it has made
    progress since its start, restart it; then produce a last chunk for the last worker. Return the
    events, the last worker and the number of records."""
    rng = random.Random(seed)
    traffic = Traffic(seed=seed, step_ms=2)
    events: list[Event] = []
    records = 0
    worker = start()
    for kill in range(KILLS):
        chunk = traffic.clean(videos=6, n=2_500)
        events += chunk
        records += sum(produce_events(settings.kafka_bootstrap, settings, chunk, per_record=3).values())
        before = progress()
        wait_until(lambda b=before: progress() > b, 90, f"progress before kill {kill + 1}", worker)  # type: ignore[misc]
        time.sleep(rng.uniform(0.0, 0.6))
        _kill(worker)
        worker = start()
    last = traffic.clean(videos=6, n=500)  # the last worker has work of its own, and is not killed
    events += last
    records += sum(produce_events(settings.kafka_bootstrap, settings, last, per_record=3).values())
    return events, worker, records


@pytest.mark.parametrize("on_redis", ["redis", "redis-cluster"], indirect=True)
def test_counter_killed_at_random_moments_counts_exactly_once(
    crash_settings: Settings, on_redis: OnRedis, start_worker: StartWorker
) -> None:
    settings = on_redis.apply(crash_settings)
    redis_client = on_redis.client
    events, worker, records = _run_with_kills(
        lambda: start_worker("counter", settings, *SESSION),
        settings,
        lambda: _stored(redis_client, settings),
        seed=41,
    )
    wait_until(lambda: _stored(redis_client, settings) >= records, 120, "the counter to catch up", worker)
    expected = oracle.count(events)
    assert {video: speed_counts(redis_client, video) for video in expected} == expected
    assert worker.stop() == 0


def test_archiver_killed_at_random_moments_logs_every_event_once(
    crash_settings: Settings, redis_client: redis.Redis, start_worker: StartWorker
) -> None:
    settings = crash_settings
    events, worker, _ = _run_with_kills(
        lambda: start_worker("archiver", settings, *SESSION),
        settings,
        lambda: len(list(settings.raw_dir.rglob("*.parquet"))) if settings.raw_dir.exists() else 0,
        seed=42,
    )
    wait_until(
        lambda: len(_log_rows(settings.raw_dir)) >= len(events), 120, "the archiver to catch up", worker
    )
    rows = _log_rows(settings.raw_dir)
    assert sorted((r["event_id"], r["ingest_ts"]) for r in rows) == sorted(  # type: ignore[type-var]
        (e.event_id, e.ingest_ts) for e in events
    )
    assert not list(settings.raw_dir.rglob("*.tmp"))
    assert worker.stop() == 0
