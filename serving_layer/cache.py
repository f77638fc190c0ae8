"""A read cache with a staleness bound per entry and one load in flight per key (no stampede)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Entry(Generic[T]):
    """A cached value and the time its load started."""

    value: T
    loaded_at: float


class ReadCache(Generic[T]):
    """Serve a value no older than `max_age` seconds; concurrent misses share one load."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[str, Entry[T]] = {}
        self._loading: dict[str, asyncio.Future[T]] = {}
        self._max_entries = max_entries
        self._clock = clock
        self.hits = 0
        self.loads = 0

    def fresh(self, key: str, max_age: float) -> Entry[T] | None:
        """The entry of `key` if it is no older than `max_age` seconds (a hit), else None."""
        entry = self._entries.get(key)
        if entry is not None and max_age > 0 and self._clock() - entry.loaded_at <= max_age:
            self.hits += 1
            return entry
        return None

    async def get(self, key: str, max_age: float, load: Callable[[], Awaitable[T]]) -> T:
        entry = self.fresh(key, max_age)
        if entry is not None:
            return entry.value
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            self.loads += 1
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

    def clear(self) -> None:
        self._entries.clear()
