"""The single-event write path in few round trips: both rate limits in one pipeline (the first
refusing scope named), scripts reloaded when Redis lost them, shard counts read ahead of their
expiry, and several ingest processes answering on one port."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from counting import keys, values
from counting.event import Event, EventType
from counting.settings import Settings, settings_env
from counting.values import ShardPlan
from ingest.app import create_app
from ingest.auth import issue_token
from ingest.publisher import ONE_SHARD, SHARDS_TTL_S, ShardPlans
from ingest.ratelimit import Limit, RateLimiter, Refusal
from ingest.reactions import ReactionState
from tally.services import free_port, wait_for_port
from tally.topics import ensure_topics
from tests.writers import heat

pytestmark = pytest.mark.integration


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def aclient(redis_url: str, redis_client: redis.Redis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_the_first_scope_over_its_limit_is_named(aclient: aioredis.Redis) -> None:
    limiter = RateLimiter(aclient)
    limits = [Limit("ip", "198.51.100.1", 3), Limit("user", "u1", 2)]
    answers = [await limiter.refusal(limits) for _ in range(3)]
    assert answers[:2] == [None, None]
    assert answers[2] is not None
    assert (answers[2].scope, answers[2].limit) == ("user", 2)
    assert 0 < answers[2].retry_after_ms <= 60_000
    # Another user from the same address: the address has admitted 3 already (the refused request
    # was admitted by the address window, which counts it).
    refused = await limiter.refusal([Limit("ip", "198.51.100.1", 3), Limit("user", "u2", 2)])
    assert refused is not None
    assert (refused.scope, refused.limit) == ("ip", 3)


async def test_limits_still_hold_after_redis_lost_the_script(
    aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    limiter = RateLimiter(aclient)
    limits = [Limit("ip", "198.51.100.2", 1), Limit("user", "u3", 10)]
    assert await limiter.refusal(limits) is None
    redis_client.script_flush()
    refused = await limiter.refusal(limits)
    assert isinstance(refused, Refusal)
    assert refused.scope == "ip"
    assert redis_client.zcard(keys.rate_window("user", "u3")) == 2


async def test_concurrent_requests_share_one_round_trip(redis_url: str, redis_client: redis.Redis) -> None:
    client = aioredis.Redis.from_url(redis_url)
    pipelines: list[bool] = []
    opened = client.pipeline

    def counted(transaction: bool = True, shard_hint: str | None = None) -> Any:
        pipelines.append(transaction)
        return opened(transaction=transaction, shard_hint=shard_hint)

    client.pipeline = counted  # type: ignore[method-assign]
    limiter, state = RateLimiter(client), ReactionState(client)
    await limiter.refusal([Limit("ip", "warm", 1)])  # Redis learns the scripts
    await state.apply([_reaction("w", "like", _now(), user="warm")])
    pipelines.clear()

    def limits(i: int) -> list[Limit]:
        return [Limit("ip", "198.51.100.4", 100), Limit("user", f"crowd{i}", 1)]

    assert await asyncio.gather(*(limiter.refusal(limits(i)) for i in range(10))) == [None] * 10
    assert pipelines == [False]
    refused = await asyncio.gather(*(limiter.refusal(limits(i)) for i in range(10)))
    assert [(r.scope, r.limit) if r else None for r in refused] == [("user", 1)] * 10
    now = _now()
    await asyncio.gather(
        *(state.apply([_reaction(f"r{i}", "like", now, user=f"crowd{i}")]) for i in range(10))
    )
    assert pipelines == [False, False, False]
    assert redis_client.hlen(keys.user_reactions("v1")) == 11
    await client.aclose()


async def test_without_redis_the_request_is_admitted() -> None:
    limiter = RateLimiter(aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0"))
    assert await limiter.refusal([Limit("ip", "198.51.100.3", 1), Limit("user", "u4", 1)]) is None


def _reaction(event_id: str, kind: EventType, ts: int, video: str = "v1", user: str = "u1") -> Event:
    return Event(event_id=event_id, type=kind, video_id=video, ts=ts, user_id=user)


async def test_reactions_latest_wins_and_survive_a_script_flush(
    aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    state = ReactionState(aclient)
    now = _now()
    await state.apply([_reaction("b", "like", now), _reaction("a", "unlike", now - 5)])
    stored = redis_client.hget(keys.user_reactions("v1"), "u1")
    assert stored is not None
    assert values.decode_acknowledged(stored) == values.Reaction(now, "b", "liked")
    redis_client.script_flush()
    await state.apply([_reaction("c", "unlike", now + 1), _reaction("d", "dislike", now, video="v2")])
    assert (
        values.decode_acknowledged(redis_client.hget(keys.user_reactions("v1"), "u1") or b"").state == "none"
    )
    assert (
        values.decode_acknowledged(redis_client.hget(keys.user_reactions("v2"), "u1") or b"").state
        == "disliked"
    )


class _CountingRedis:
    """An asyncio Redis whose reads of the shard plans are counted."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.reads = 0

    async def hgetall(self, name: str) -> dict[bytes, bytes]:
        self.reads += 1
        return await self.client.hgetall(name)  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self.client.aclose()


async def test_shard_plans_are_read_whole_once_for_every_write_and_ahead_of_their_expiry(
    settings: Settings, redis_client: redis.Redis
) -> None:
    hot = settings.model_copy(update={"hot_video_events_per_sec": 10})

    async def heated_to(shards: int) -> ShardPlan:
        """The real counter, in a Redis of its own (the video's plan is made once a deployment),
        plans "hot" over `shards` shards; the plan it wrote."""
        redis_client.flushdb()
        capped = hot.model_copy(update={"max_video_shards": shards})
        plan = await asyncio.to_thread(heat, capped, "hot")  # the writers' own event loop
        assert plan.shards == shards
        return plan

    counting = _CountingRedis(aioredis.Redis.from_url(settings.redis_url))
    clock = [1_000.0]
    plans = ShardPlans(counting, clock=lambda: clock[0])  # type: ignore[arg-type]
    four = await heated_to(4)
    # Ten writes waiting at once for the first read: one read serves them all, and every video.
    answers = await asyncio.gather(*(plans.current() for _ in range(10)))
    assert all(answer == {"hot": four} for answer in answers)
    assert answers[0].get("cold", ONE_SHARD) == ShardPlan(1)
    assert counting.reads == 1
    eight = await heated_to(8)
    clock[0] += SHARDS_TTL_S * 0.6  # still trusted: answered at once, read again in the background
    assert await plans.current() == {"hot": four}
    deadline = time.monotonic() + 5
    while counting.reads < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert counting.reads == 2
    assert await plans.current() == {"hot": eight}
    assert counting.reads == 2
    clock[0] += SHARDS_TTL_S  # expired: read before it is used
    sixteen = await heated_to(16)
    assert await plans.current() == {"hot": sixteen}
    assert counting.reads == 3
    await plans.close()


def test_the_single_route_refuses_naming_the_address_scope(settings: Settings, broker: str) -> None:
    limited = settings.model_copy(
        update={"kafka_bootstrap": broker, "rate_limit_ip_per_min": 2, "rate_limit_user_per_min": 100}
    )
    ensure_topics(limited)
    with TestClient(create_app(limited), client=("203.0.113.9", 40_000)) as client:
        statuses = []
        for i in range(3):
            token = issue_token(limited.user_token_secret, f"user{i}", 600)
            answer = client.post("/v1/videos/v1/like", headers={"authorization": f"Bearer {token}"})
            statuses.append(answer.status_code)
        assert statuses == [202, 202, 429]
        assert answer.json()["errors"][0]["field"] == "ip"
        assert 1 <= int(answer.headers["retry-after"]) <= 60


@pytest.fixture
def two_workers(settings: Settings, broker: str, tmp_path: Path) -> Iterator[tuple[Settings, list[int]]]:
    """`python -m ingest` with `ingest_workers` 2: the settings and the pids of its two workers."""
    configured = settings.model_copy(
        update={"kafka_bootstrap": broker, "ingest_port": free_port(), "ingest_workers": 2}
    )
    ensure_topics(configured)
    log = tmp_path / "ingest.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "ingest"],
            env={**os.environ, **settings_env(configured)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(configured.ingest_port, 30, "the ingest API", log)
        workers: list[int] = []
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = _workers(process.pid)
            time.sleep(0.1)
        assert len(workers) == 2, log.read_text()
        yield configured, workers
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def _workers(parent: int) -> list[int]:
    """The children of `parent` that serve (not multiprocessing's resource tracker)."""
    found = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]


def _likes(settings: Settings, count: int) -> list[int]:
    token = issue_token(settings.user_token_secret, "u-workers", 600)
    statuses = []
    for _ in range(count):  # a new connection each: any worker may take it
        answer = httpx.post(
            f"http://127.0.0.1:{settings.ingest_port}/v1/videos/v1/like",
            headers={"authorization": f"Bearer {token}"},
            timeout=30,
        )
        statuses.append(answer.status_code)
    return statuses


@pytest.mark.slow
def test_every_worker_answers_on_the_one_port(two_workers: tuple[Settings, list[int]]) -> None:
    settings, workers = two_workers
    # Once each worker is up (the first requests may wait for the other to finish starting).
    assert _likes(settings, 4) == [202] * 4
    for stopped in workers:  # with one worker paused, the other answers every request alone
        os.kill(stopped, signal.SIGSTOP)
        try:
            assert _likes(settings, 5) == [202] * 5
        finally:
            os.kill(stopped, signal.SIGCONT)
