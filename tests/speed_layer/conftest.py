"""Fixtures of the speed-layer tests: worker subprocesses that are stopped when the test ends, an
asyncio Redis client on the test's Redis, and the tests' settings on a single Redis or a Redis Cluster."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from counting.redisconn import sync_client
from counting.settings import Settings
from speed_layer.sink import sink
from tests.speed_layer.helpers import ROOT, OnRedis, WorkerProcess, worker_env


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start speed-layer workers as subprocesses; every one still running is stopped at the end."""
    started: list[WorkerProcess] = []

    def start(name: str, settings: Settings, *args: str) -> WorkerProcess:
        log = tmp_path / f"{name}-{len(started)}.log"
        with open(log, "wb") as handle:  # the child keeps its own copy
            process = subprocess.Popen(
                [sys.executable, "-m", "speed_layer", name, *args],
                cwd=ROOT,
                env=worker_env(settings),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
async def aclient(redis_client: redis.Redis, redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on the test's Redis (flushed before and after by `redis_client`)."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(params=["redis", "redis-cluster"])
def on_redis(request: pytest.FixtureRequest, redis_client: redis.Redis, redis_url: str) -> Iterator[OnRedis]:
    """The test once on the session's single Redis and once on its local 3-master Redis Cluster
    (started on first use), each flushed before and after."""
    if request.param == "redis":
        yield OnRedis(redis_url, False, redis_client)
        return
    url = request.getfixturevalue("redis_cluster_url")
    on = OnRedis(url, True, sync_client(Settings(redis_url=url, redis_cluster=True)))
    on.client.flushall()
    yield on
    on.client.flushall()
    on.client.close()


@pytest.fixture(autouse=True)
def _no_folded_viewer_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without the viewer sets an earlier test's sink found folded."""
    monkeypatch.setattr(sink, "FOLDED", set())
