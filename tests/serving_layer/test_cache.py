"""The read cache: a staleness bound per read, one load in flight per key, errors not cached."""

from __future__ import annotations

import asyncio

import pytest

from serving_layer.cache import ReadCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_serves_from_cache_within_the_bound_and_reloads_after() -> None:
    clock = Clock()
    cache: ReadCache[int] = ReadCache(clock=clock)
    loads = iter(range(100))

    async def load() -> int:
        return next(loads)

    assert await cache.get("v", 1.0, load) == 0
    clock.now = 0.9
    assert await cache.get("v", 1.0, load) == 0
    assert await cache.get("v", 0.5, load) == 1, "a tighter bound reloads"
    clock.now = 2.0
    assert await cache.get("v", 1.0, load) == 2
    assert (cache.hits, cache.loads) == (1, 3)


async def test_concurrent_misses_share_one_load() -> None:
    cache: ReadCache[str] = ReadCache()
    calls = 0
    release = asyncio.Event()

    async def load() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "counts"

    waiters = [asyncio.create_task(cache.get("hot", 1.0, load)) for _ in range(50)]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(*waiters) == ["counts"] * 50
    assert calls == 1


async def test_a_failed_load_reaches_every_waiter_and_is_not_cached() -> None:
    cache: ReadCache[int] = ReadCache()
    release = asyncio.Event()

    async def failing() -> int:
        await release.wait()
        raise ConnectionError("redis down")

    waiters = [asyncio.create_task(cache.get("v", 1.0, failing)) for _ in range(3)]
    await asyncio.sleep(0.01)
    release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)

    async def working() -> int:
        return 7

    assert await cache.get("v", 1.0, working) == 7


async def test_zero_bound_always_reloads() -> None:
    cache: ReadCache[int] = ReadCache()
    counter = iter(range(10))

    async def load() -> int:
        return next(counter)

    assert [await cache.get("v", 0.0, load) for _ in range(3)] == [0, 1, 2]


@pytest.mark.parametrize("entries", [1, 3])
async def test_entry_limit_bounds_memory(entries: int) -> None:
    cache: ReadCache[int] = ReadCache(max_entries=entries)

    async def load() -> int:
        return 1

    for i in range(10):
        await cache.get(f"v{i}", 10.0, load)
    assert len(cache._entries) <= entries
