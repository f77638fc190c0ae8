"""The batch boundary on the real stack: answers served before a batch, while it computes and
publishes, and after it each equal the oracle over the events acknowledged by then."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
import redis
from pyspark.sql import SparkSession

from batch_layer import run_batch
from counting import oracle
from counting.settings import Settings
from tally.loadgen import post_traffic
from tally.speedview import counter_caught_up, wait_until, watermark
from tally.stack import Stack
from tally.traffic_run import generate_items

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Counts = tuple[int, int, int, int]


def _counts(answer: dict[str, Any]) -> Counts:
    return (answer["views"], answer["likes"], answer["dislikes"], answer["unique_viewers"])


def _oracle(events: list[Any]) -> dict[str, Counts]:
    return {v: (c.views, c.likes, c.dislikes, c.unique_viewers) for v, c in oracle.count(events).items()}


def test_counts_hold_before_during_and_after_a_publish(
    stack: Stack, stack_settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    settings = stack_settings
    ingest = f"http://127.0.0.1:{settings.ingest_port}"
    first = post_traffic(generate_items(2_500, 600.0, 21, 15, False), ingest, settings.collector_key)
    wait_until(lambda: counter_caught_up(redis_client, settings), 90, "the counter catching up")
    expected = _oracle(first.events)
    videos = sorted(expected)

    stamps = sorted(e.ingest_ts or 0 for e in first.events)
    cutoff = stamps[len(stamps) // 2] // settings.bucket_ms * settings.bucket_ms
    wait_until(lambda: watermark(redis_client) >= cutoff, 90, "the archiver closing the cutoff")

    seen: list[tuple[int | None, str, Counts]] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}") as api:
            while not stop.is_set():
                for video in videos:
                    answer = api.get(f"/v1/videos/{video}/stats").json()
                    seen.append((answer["batch_cutoff"], video, _counts(answer)))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        run_batch(settings, cutoff, spark=spark)  # the session's own: a batch given none stops it
        wait_until(
            lambda: any(c == cutoff for c, _, _ in seen[-len(videos) :]), 30, "an answer at the cutoff"
        )
    finally:
        stop.set()
        poller.join()

    cutoffs = {c for c, _, _ in seen}
    assert cutoffs == {None, cutoff}, "the polling must span the publish"
    wrong = [(c, v, got, expected[v]) for c, v, got in seen if got != expected[v]]
    assert wrong == []

    second = post_traffic(generate_items(1_500, 2_000.0, 22, 15, False), ingest, settings.collector_key)
    wait_until(lambda: counter_caught_up(redis_client, settings), 90, "the counter catching up")
    expected = _oracle(first.events + second.events)
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}") as api:
        served = {v: _counts(api.get(f"/v1/videos/{v}/stats").json()) for v in sorted(expected)}
    assert served == expected
