"""The script calls of concurrent requests sent to Redis together: one round trip for many requests
(the rate limits and the reaction state use them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from counting import redisconn

Call = redisconn.ScriptCall


class ScriptCalls:
    """Calls of one Lua script by concurrent requests, sent together: the calls made in one turn of
    the event loop go out as EVALSHA in one pipeline (not a transaction: their keys may sit in
    different Redis Cluster slots), so a loaded process pays one round trip for many requests.

    When Redis lost the script (a restart, SCRIPT FLUSH) it is loaded and the pipeline sent again:
    the scripts run here must be safe to run twice.
    """

    def __init__(self, redis: Redis, source: str) -> None:
        self._redis = redis
        self._source = source
        self._pending: list[tuple[Sequence[Call], asyncio.Future[list[Any]]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, calls: Sequence[Call]) -> list[Any]:
        """The answers of `calls` ((key, args) each), in order; an error answer is returned as
        its exception; a Redis that does not answer raises."""
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._pending.append((calls, future))
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Sequence[Call], asyncio.Future[list[Any]]]]) -> None:
        calls = [call for calls, _ in batch for call in calls]
        try:
            answers = await redisconn.eval_each(self._redis, self._source, calls)
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        at = 0
        for own, future in batch:
            if not future.done():
                future.set_result(answers[at : at + len(own)])
            at += len(own)
