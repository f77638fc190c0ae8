"""The workers as processes (`python -m speed_layer counter|archiver`) on a real broker and Redis."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from counting import keys, logs, oracle
from counting.settings import Settings
from tally.topics import ensure_topics
from tests.speed_layer.helpers import (
    Traffic,
    WorkerProcess,
    produce,
    produce_events,
    speed_counts,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def stack_settings(settings: Settings, broker: str) -> Settings:
    configured = settings.model_copy(
        update={
            "kafka_bootstrap": broker,
            "topic_partitions": 3,
            "counter_flush_ms": 100,
            "archiver_flush_ms": 300,
        }
    )
    ensure_topics(configured)
    return configured


def _counter_done(client: redis.Redis, settings: Settings, records: dict[int, int]) -> Callable[[], bool]:
    def done() -> bool:
        for partition, count in records.items():
            raw = client.get(keys.counter_offset(settings.events_topic, partition))
            if raw is None or int(raw) < count - 1:
                return False
        return True

    return done


def _dead_letters(
    settings: Settings, expected: int, timeout: float = 20.0
) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"dlq-{time.time()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(settings.dead_letter_topic, 0, 0)])
    found: list[tuple[bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            found.append((message.value() or b"", dict(message.headers() or [])))
    finally:
        consumer.close()
    return found


def test_counter_counts_exactly_once_and_dead_letters_poison(
    stack_settings: Settings, redis_client: redis.Redis, start_worker: StartWorker
) -> None:
    events = Traffic(seed=11, step_ms=20).mixed(n=500)
    expected = oracle.count(events)
    records = produce_events(stack_settings.kafka_bootstrap, stack_settings, events)
    poison = os.urandom(64)
    produce(stack_settings.kafka_bootstrap, stack_settings.events_topic, [(0, b"junk", poison)])
    records[0] = records.get(0, 0) + 1

    counter = start_worker("counter", stack_settings)
    wait_until(_counter_done(redis_client, stack_settings, records), 60, "the counter to catch up", counter)

    assert {video: speed_counts(redis_client, video) for video in expected} == expected
    [(value, headers)] = _dead_letters(stack_settings, 1)
    assert value == poison
    assert headers["tally-source-topic"] == stack_settings.events_topic.encode()
    assert b"msgpack" in headers["tally-error"]
    assert counter.stop() == 0
    assert "event=counter_batch" in counter.text()
    # One log format for every process: each line (Faust's own too) has the same leading fields.
    parsed = [logs.parse(line) for line in counter.text().splitlines() if line.strip()]
    assert parsed and all(list(p)[:5] == list(logs.LEADING_FIELDS) for p in parsed)
    assert {p["process"] for p in parsed} == {"counter"}


def test_a_restarted_counter_from_offset_zero_changes_nothing(
    stack_settings: Settings, redis_client: redis.Redis, start_worker: StartWorker
) -> None:
    events = Traffic(seed=12).mixed(n=300)
    expected = oracle.count(events)
    records = produce_events(stack_settings.kafka_bootstrap, stack_settings, events)
    first = start_worker("counter", stack_settings)
    wait_until(_counter_done(redis_client, stack_settings, records), 60, "the counter to catch up", first)
    assert first.stop() == 0

    # Replay: a new consumer group reads every record again; the offsets in Redis skip them all.
    second = start_worker("counter", stack_settings, "--group", f"replay-{stack_settings.events_topic}")
    replayed = re.compile(r"event=counter_batch .* applied=0 duplicates=0 skipped=[1-9]")
    wait_until(lambda: replayed.search(second.text()) is not None, 60, "the replay", second)
    assert {video: speed_counts(redis_client, video) for video in expected} == expected
    more = Traffic(seed=13).mixed(n=50)
    more_records = produce_events(stack_settings.kafka_bootstrap, stack_settings, more)
    total = {p: records.get(p, 0) + more_records.get(p, 0) for p in set(records) | set(more_records)}
    wait_until(_counter_done(redis_client, stack_settings, total), 60, "the counter to catch up", second)
    both = oracle.count(events + more)
    assert {video: speed_counts(redis_client, video) for video in both} == both
    assert second.stop() == 0


def test_archiver_writes_every_event_once_and_advances_the_watermark(
    stack_settings: Settings, redis_client: redis.Redis, start_worker: StartWorker
) -> None:
    events = Traffic(seed=21, step_ms=20).mixed(n=400)
    records = produce_events(stack_settings.kafka_bootstrap, stack_settings, events)
    archiver = start_worker("archiver", stack_settings)
    newest = max(e.ingest_ts or 0 for e in events)

    def watermark() -> int:
        raw = redis_client.get(keys.archiver_watermark())
        return int(raw) if raw is not None else 0

    wait_until(lambda: watermark() > newest, 60, "the watermark to pass the events", archiver)
    rows = _read_log(stack_settings.raw_dir)
    assert sorted((r["event_id"], r["ingest_ts"]) for r in rows) == sorted(
        (e.event_id, e.ingest_ts) for e in events
    )
    assert len(
        {(r["kafka_partition"], r["kafka_offset"], r["event_id"], r["ingest_ts"]) for r in rows}
    ) == len(rows)
    for row in rows:
        stamp = time.gmtime(row["ingest_ts"] / 1000)
        assert (row["ingest_date"], row["ingest_hour"]) == (time.strftime("%Y-%m-%d", stamp), stamp.tm_hour)
    assert {r["kafka_partition"] for r in rows} == set(records)

    # Idle: the watermark keeps moving; a restart writes no second copy.
    idle = watermark()
    wait_until(lambda: watermark() > idle + 500, 20, "an idle watermark to advance", archiver)
    assert archiver.stop() == 0
    files_before = sorted(p.name for p in stack_settings.raw_dir.rglob("*.parquet"))
    again = start_worker("archiver", stack_settings)
    more = Traffic(seed=22).mixed(n=40)
    produce_events(stack_settings.kafka_bootstrap, stack_settings, more)
    wait_until(
        lambda: len(_read_log(stack_settings.raw_dir)) == len(events) + len(more),
        60,
        "the new events",
        again,
    )
    assert set(files_before) <= {p.name for p in stack_settings.raw_dir.rglob("*.parquet")}
    assert sorted(r["event_id"] for r in _read_log(stack_settings.raw_dir)) == sorted(
        e.event_id for e in events + more
    )
    assert again.stop() == 0


def _read_log(raw_dir: Path) -> list[dict[str, object]]:
    if not raw_dir.exists():
        return []
    dataset = ds.dataset(raw_dir, format="parquet", partitioning="hive")
    return dataset.to_table().to_pylist()
