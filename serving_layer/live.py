"""Server-sent events of a video's counts: a message whenever they change, keep-alives between."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

LIVE_FIELDS = ("views", "likes", "dislikes", "unique_viewers", "watching_now")


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def live_stream(
    read: Callable[[], Awaitable[dict[str, Any]]],
    disconnected: Callable[[], Awaitable[bool]],
    interval: float = 0.5,
    keepalive: float = 15.0,
    max_messages: int | None = None,
) -> AsyncIterator[str]:
    """Poll `read()` every `interval` seconds and send the counts when any live field changed."""
    last: tuple[Any, ...] | None = None
    quiet = 0.0
    sent = 0
    while not await disconnected():
        try:
            stats = await read()
        except Exception as exc:  # a store fault is reported to the client, the stream goes on
            yield sse("error", {"reason": str(exc)})
            stats = None
        if stats is not None:
            current = tuple(stats.get(f) for f in LIVE_FIELDS)
            if current != last:
                last = current
                quiet = 0.0
                yield sse("stats", stats)
                sent += 1
                if max_messages is not None and sent >= max_messages:
                    return
        if quiet >= keepalive:
            quiet = 0.0
            yield ": keep-alive\n\n"
        await asyncio.sleep(interval)
        quiet += interval
