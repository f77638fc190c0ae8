"""Serving-layer fixtures: the API on the test's Redis and data directory, and helpers that
publish a baseline and put speed deltas where the speed layer would."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient

from counting import keys
from counting.settings import Settings
from serving_layer.app import create_app
from serving_layer.baselines import SERIES_DIR
from warehouse.baseline import BaselineRow, publish_baseline, rows_table, write_table


def bucket_now(settings: Settings) -> int:
    return time.time_ns() // 1_000_000 // settings.bucket_ms


def publish(
    settings: Settings,
    run_id: str,
    cutoff: int,
    rows: list[BaselineRow],
    series: list[dict[str, object]] | None = None,
) -> None:
    """Write a baseline (and its per-bucket series) aside, then switch to it."""
    write_table(settings.baselines_dir / run_id / "baseline.parquet", rows_table(rows))
    if series is not None:
        folder = settings.batch_dir / run_id / SERIES_DIR
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(series), folder / "part-0.parquet")
    publish_baseline(settings.baselines_dir, run_id, cutoff, "test", cutoff)


def put_speed(client: redis.Redis, video_id: str, bucket: int, **fields: int) -> None:
    """A speed bucket's deltas, filed as the counter files them."""
    client.hset(keys.bucket_counts(video_id, bucket), mapping=fields)
    client.zadd(keys.buckets_index(video_id), {str(bucket): bucket})


def claim_partitions(client: redis.Redis, settings: Settings) -> None:
    """What a running counter leaves in Redis: an owner generation per partition it counts."""
    for partition in range(settings.topic_partitions):
        client.set(keys.partition_owner(settings.events_topic, partition), 1)


@pytest.fixture
def api(settings: Settings, redis_client: redis.Redis) -> Iterator[TestClient]:
    """The API over a Redis in which a counter runs (its partitions claimed)."""
    claim_partitions(redis_client, settings)
    with TestClient(create_app(settings)) as client:
        yield client
