"""`tally speed rebuild` replays the log in ingestion order across partitions: a hot video's viewer
whose events moved to another partition (its shard count grew) keeps its first view counted in the
bucket the oracle counts it in, so the counts after a batch cutoff stay exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import redis
import redis.asyncio as aioredis

from counting import keys, oracle
from counting.event import Event
from counting.settings import Settings
from speed_layer.rebuild import archived_records, partition_runs, rebuild
from speed_layer.records import Record
from tests.logfiles import hour_folder, log_rows, write_rows

T0 = 1_800_000_000_000  # on a bucket edge of 2 s buckets


def _view(event_id: str, ingest_ts: int) -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id="viral",
        ts=ingest_ts - 100,
        user_id="alice",
        session_id="s",
        watch_secs=60.0,
        ingest_ts=ingest_ts,
    )


def _write_partition(raw_dir: Path, partition: int, events: list[Event]) -> None:
    rows = log_rows(events)
    for row in rows:
        row["kafka_partition"] = partition
    write_rows(hour_folder(raw_dir, events[0].ingest_ts or 0), f"events-{partition}-00000.parquet", rows)


def _bucket_views(client: redis.Redis, bucket: int) -> dict[str, int]:
    raw = client.hgetall(keys.bucket_counts("viral", bucket))
    return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]


def test_rebuild_counts_a_moved_viewer_in_the_bucket_of_its_first_ingested_view(
    settings: Settings, redis_client: redis.Redis
) -> None:
    # Alice's first view went to partition 1 (shard 0), her second, 5 s later in the same window,
    # to partition 0 once the video had more shards. Partition 0 sorts first by number. The
    # Redis-state counter's replay: the state counter moves a viewer only by its home's shard plan,
    # which this log has not (its rebuild of a real move: test_state_counter.py).
    settings = settings.model_copy(update={"counter_state": "redis"})
    first, second = _view("a1", T0 + 500), _view("a2", T0 + 5_500)
    _write_partition(settings.raw_dir, 1, [first])
    _write_partition(settings.raw_dir, 0, [second])

    records = archived_records(settings)
    assert [(r.partition, r.offset) for r in records] == [(1, 0), (0, 0)], "ingestion order"

    async def run() -> None:
        client = aioredis.Redis.from_url(settings.redis_url)
        await rebuild(settings, client)
        await client.aclose()

    asyncio.run(run())
    expected = oracle.count([first, second])["viral"]
    assert (expected.views, expected.repeat_views) == (1, 1)
    first_bucket = (T0 + 500) // settings.bucket_ms
    second_bucket = (T0 + 5_500) // settings.bucket_ms
    assert _bucket_views(redis_client, first_bucket).get("views") == 1
    assert _bucket_views(redis_client, first_bucket).get("uniques") == 1
    assert _bucket_views(redis_client, second_bucket).get("views", 0) == 0
    assert _bucket_views(redis_client, second_bucket).get("repeat_views") == 1


def test_partition_runs_keep_the_order_and_split_at_each_partition_change() -> None:
    records = [Record("t", p, o, msgspec.msgpack.encode([])) for p, o in [(0, 0), (0, 1), (1, 0), (0, 2)]]
    runs = partition_runs(records, 10)
    assert [[(r.partition, r.offset) for r in run] for run in runs] == [[(0, 0), (0, 1)], [(1, 0)], [(0, 2)]]
    assert [len(run) for run in partition_runs(records[:2], 1)] == [1, 1]
