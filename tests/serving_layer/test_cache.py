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


async def test_a_key_read_often_is_loaded_again_before_its_entry_expires() -> None:
    clock = Clock()
    cache: ReadCache[int] = ReadCache(clock=clock, refresh_after=0.5)
    values = iter(range(100))
    release = asyncio.Event()

    async def load() -> int:
        value = next(values)
        if value:  # the background loads wait until released: the readers must not
            await release.wait()
        return value

    assert await cache.get("v", 1.0, load) == 0
    clock.now = 0.2
    assert await cache.get("v", 1.0, load) == 0
    clock.now = 0.6
    assert await cache.get("v", 1.0, load) == 0, "read twice and past half its bound: served at once"
    assert cache.loads == 2, "and loaded again in the background"
    assert await cache.get("v", 1.0, load) == 0, "one background load at a time"
    assert cache.loads == 2
    release.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    clock.now = 1.1  # the first entry has expired; the one loaded at 0.6 has not
    assert await cache.get("v", 1.0, load) == 1
    assert cache.loads == 2


async def test_without_refresh_after_a_key_is_loaded_only_when_its_entry_expires() -> None:
    clock = Clock()
    cache: ReadCache[int] = ReadCache(clock=clock)
    values = iter(range(100))

    async def load() -> int:
        return next(values)

    for now in (0.0, 0.3, 0.6, 0.9):
        clock.now = now
        assert await cache.get("v", 1.0, load) == 0
        await asyncio.sleep(0)
    assert cache.loads == 1


async def test_a_key_read_once_in_its_bound_is_not_loaded_ahead() -> None:
    clock = Clock()
    cache: ReadCache[int] = ReadCache(clock=clock, refresh_after=0.5)
    values = iter(range(100))

    async def load() -> int:
        return next(values)

    assert await cache.get("v", 1.0, load) == 0
    clock.now = 0.9
    assert await cache.get("v", 1.0, load) == 0
    await asyncio.sleep(0)
    assert cache.loads == 1
    clock.now = 1.5
    assert await cache.get("v", 1.0, load) == 1
    assert cache.loads == 2


async def test_a_failed_background_load_is_logged_and_the_entry_served_until_it_expires(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    cache: ReadCache[int] = ReadCache(clock=clock, refresh_after=0.5)
    fail = False

    async def load() -> int:
        if fail:
            raise ConnectionError("redis down")
        return 5

    assert await cache.get("v", 1.0, load) == 5
    fail = True
    clock.now = 0.1
    assert await cache.get("v", 1.0, load) == 5
    clock.now = 0.7
    assert await cache.get("v", 1.0, load) == 5
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert "cache_refresh_failed" in caplog.text and "redis down" in caplog.text
    assert await cache.get("v", 1.0, load) == 5, "the entry is still within its bound"
    clock.now = 1.2
    with pytest.raises(ConnectionError):
        await cache.get("v", 1.0, load)
