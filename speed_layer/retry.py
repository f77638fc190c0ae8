"""Retry an action while a store (Redis, the broker, the disk) is unreachable: the workers' writes
are idempotent, so the same batch is simply written again once the store answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from speed_layer import logs

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
T = TypeVar("T")


async def until_reachable(what: str, action: Callable[[], Awaitable[T]], **hint: Any) -> T:
    """Run `action` until it does not fail on an unreachable store, waiting 0.2 s, then twice as
    long each time up to 5 s; each failure is logged as `<what>_unavailable` with `hint`'s fields."""
    delay = RETRY_FIRST_S
    while True:
        try:
            return await action()
        except UNREACHABLE as exc:
            logs.error(f"{what}_unavailable", error=exc, retry_in_s=delay, **hint)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
