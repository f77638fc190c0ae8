"""The Faust counter agent in `agent.test_context()` (no broker) against a real Redis."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
import redis

from counting import keys, oracle
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer import heap
from speed_layer.app import WorkerOptions, app_id, create_counter_app
from speed_layer.counter.state_counter import StateCounter
from tests.speed_layer.helpers import Traffic, speed_counts

pytestmark = pytest.mark.integration


@pytest.mark.serial  # the agent has 5 s (100 looks 0.05 s apart) to count every batch
async def test_counter_agent_counts_what_it_is_given(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    app = create_counter_app(settings.model_copy(update={"counter_flush_ms": 50}))
    [agent] = app.agents.values()
    events = Traffic(seed=41).mixed(n=150)
    async with agent.test_context() as running:
        for start in range(0, len(events), 5):
            await running.put(encode_events(events[start : start + 5]))
        offset_key = keys.counter_offset(settings.events_topic, 0)
        for _ in range(100):
            if redis_client.get(offset_key) == str(len(events) // 5 - 1).encode():
                break
            await asyncio.sleep(0.05)
    expected = oracle.count(events)
    assert {video: speed_counts(redis_client, video) for video in expected} == expected


def test_each_worker_kind_has_its_own_consumer_group(settings: Settings) -> None:
    assert app_id("counter", settings) != app_id("archiver", settings)
    assert app_id("counter", settings, group="replay-1") == "replay-1"


def test_the_counter_sets_the_collector_for_the_state_it_holds(settings: Settings) -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, before[1], before[2])
        create_counter_app(settings)

        # the older generations as they were
        assert gc.get_threshold() == (heap.YOUNG_OBJECTS, before[1], before[2])
    finally:
        gc.set_threshold(*before)


async def test_an_unexpected_failure_stops_the_worker_instead_of_skipping_the_batch(
    settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashes: list[tuple[str, BaseException]] = []
    boom = RuntimeError("a bug")

    async def fail(self: object, batch: object) -> None:
        raise boom

    monkeypatch.setattr(StateCounter, "write", fail)
    app = create_counter_app(settings, WorkerOptions(crash=lambda worker, exc: crashes.append((worker, exc))))
    [agent] = app.agents.values()
    async with agent.test_context() as running:
        await running.put(encode_events(Traffic(seed=42).mixed(n=5)))
        for _ in range(100):
            if crashes:
                break
            await asyncio.sleep(0.05)
    assert crashes == [("counter", boom)]
    assert redis_client.get(keys.counter_offset(settings.events_topic, 0)) is None
