"""Read-side helpers for the CLI and tests: speed totals, the archiver watermark, counter catch-up."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from counting import keys
from counting.offsets import end_reader, read_ends
from counting.settings import Settings


def speed_totals(client: redis.Redis, video_id: str) -> dict[str, int]:
    """Sum of every speed bucket of a video (what the speed layer alone has counted)."""
    totals: dict[str, int] = {}
    buckets: list[bytes] = client.zrange(keys.buckets_index(video_id), 0, -1)  # type: ignore[assignment]
    for bucket in buckets:
        hashed: dict[bytes, bytes] = client.hgetall(keys.bucket_counts(video_id, int(bucket)))  # type: ignore[assignment]
        for name, value in hashed.items():
            field = name.decode()
            totals[field] = totals.get(field, 0) + int(value)
    return totals


def watermark(client: redis.Redis) -> int:
    raw = client.get(keys.archiver_watermark())
    return int(raw) if raw is not None else 0


def end_offsets(settings: Settings) -> dict[int, int]:
    """The next offset of each partition of the events topic."""
    consumer = end_reader(settings.kafka_bootstrap, "tally-cli-offsets")
    try:
        return read_ends(consumer, settings.events_topic, range(settings.topic_partitions), 10)
    finally:
        consumer.close()


def counter_caught_up(client: redis.Redis, settings: Settings) -> bool:
    """True once the counter's exactly-once offsets in Redis reach the end of every partition."""
    for partition, end in end_offsets(settings).items():
        if end == 0:
            continue
        raw = client.get(keys.counter_offset(settings.events_topic, partition))
        if raw is None or int(raw) < end - 1:
            return False
    return True


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.25) -> None:
    """Poll `predicate()` until it is true; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
