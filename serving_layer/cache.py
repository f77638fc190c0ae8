"""A read cache with a staleness bound per entry, one load in flight per key (no stampede), and,
where a cache asks for it, a key read often loaded anew before its entry expires (its readers do
not wait for the load)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from counting.logs import Log

T = TypeVar("T")
_log = Log("tally.serving.cache")
# With `refresh_after`, an entry read at least this many times since its load is loaded again in
# the background once it is that share of its bound old. A key read about once in a bound (most
# keys of a large catalogue) is not: that would double its loads.
REFRESH_READS = 2


@dataclass
class Entry(Generic[T]):
    """A cached value, the time its load started, and the reads it served (its load's one
    included)."""

    value: T
    loaded_at: float
    reads: int = 1


class ReadCache(Generic[T]):
    """Serve a value no older than `max_age` seconds; concurrent misses share one load.
    `refresh_after` (a share of the bound, e.g. 0.8): load a key read often again in the background
    once its entry is that old, for keys whose load is dear and whose readers should not wait for
    it (a creator's answer reads all of its videos). Each background load costs as much as a miss:
    on the stats route, whose loads are one script call, it cost more in the tail than it saved
    (bench.serving, 2026-12-07)."""

    def __init__(
        self,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
        refresh_after: float | None = None,
    ) -> None:
        self._entries: dict[str, Entry[T]] = {}
        self._loading: dict[str, asyncio.Future[T]] = {}
        self._refreshing: set[asyncio.Future[T]] = set()  # background loads, held until done
        self._max_entries = max_entries
        self._clock = clock
        self._refresh_after = refresh_after
        self.hits = 0
        self.loads = 0

    def fresh(
        self, key: str, max_age: float, load: Callable[[], Awaitable[T]] | None = None
    ) -> Entry[T] | None:
        """The entry of `key` if it is no older than `max_age` seconds (a hit), else None. With
        `load` and `refresh_after`, a hit on an entry read `REFRESH_READS` times and past that share
        of its bound starts a load of the key in the background (unless one is in flight)."""
        entry = self._entries.get(key)
        if entry is None or max_age <= 0:
            return None
        age = self._clock() - entry.loaded_at
        if age > max_age:
            return None
        self.hits += 1
        after = self._refresh_after
        if after is None or load is None:
            return entry  # no read ahead: nothing more to do on a hit
        entry.reads += 1
        if age > max_age * after and entry.reads > REFRESH_READS and key not in self._loading:
            self._refresh(key, load)
        return entry

    async def get(self, key: str, max_age: float, load: Callable[[], Awaitable[T]]) -> T:
        entry = self.fresh(key, max_age, load)
        if entry is not None:
            return entry.value
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        return await self._load(key, self._begin(key), load)

    def _begin(self, key: str) -> asyncio.Future[T]:
        """A load of `key` in flight from now: what its concurrent readers wait for."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        self.loads += 1
        return future

    async def _load(self, key: str, future: asyncio.Future[T], load: Callable[[], Awaitable[T]]) -> T:
        try:
            started = self._clock()
            value = await load()
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            self._entries[key] = Entry(value, started)
            future.set_result(value)
            return value
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through their own await
            raise
        finally:
            del self._loading[key]

    def _refresh(self, key: str, load: Callable[[], Awaitable[T]]) -> None:
        """Load `key` in the background; a failure is logged and left to the next reader's own
        load once the entry expires."""
        task = asyncio.ensure_future(self._load(key, self._begin(key), load))
        self._refreshing.add(task)
        task.add_done_callback(lambda done: self._refreshed(key, done))

    def _refreshed(self, key: str, task: asyncio.Future[T]) -> None:
        self._refreshing.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            _log.warning("cache_refresh_failed", key=key, error=f"{type(exc).__name__}: {exc}")

    def clear(self) -> None:
        self._entries.clear()
