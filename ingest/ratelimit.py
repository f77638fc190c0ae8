"""Sliding-window rate limits kept in Redis: at most N requests per key in the last window."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from redis.asyncio import Redis
from redis.exceptions import RedisError

from counting import keys
from counting.logs import Log
from ingest.scripts import ScriptCalls

log = Log("tally.ingest.ratelimit")

# KEYS[1]: the window's sorted set. ARGV: now ms, window ms, limit, member.
# Answers 0 when admitted, else the milliseconds until the oldest request leaves the window.
_ADMIT = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], window)
return 0
"""


class Limit(NamedTuple):
    """One limit a request must pass: its scope (`ip`, `user`), whose window, and the most requests
    that window admits in a minute."""

    scope: str
    subject: str
    per_window: int


class Refusal(NamedTuple):
    """The limit a request went over and how long until its window admits one more."""

    scope: str
    limit: int
    retry_after_ms: int


class RateLimiter:
    """Admits requests per key (an address, a user) within a limit per sliding minute.

    All the limits of a request are checked in one round trip: a pipeline of one script call per
    window, not a transaction, since the windows' keys sit in different Redis Cluster slots. Each
    window records the request when it admits it, whatever the others answer.

    When Redis is unreachable the request is admitted and a warning logged: writes are worth more
    than the limit, and the broker, not Redis, is what an acknowledgement depends on.
    """

    def __init__(self, redis: Redis, window_ms: int = 60_000) -> None:
        self._script = ScriptCalls(redis, _ADMIT)
        self._window = window_ms

    async def refusal(self, limits: Sequence[Limit]) -> Refusal | None:
        """None when every limit admits the request; else the first one (in the given order) that
        refused it."""
        now = time.time_ns() // 1_000_000
        member = uuid.uuid4().hex
        calls = [
            (keys.rate_window(limit.scope, limit.subject), (now, self._window, limit.per_window, member))
            for limit in limits
        ]
        try:
            answers = await self._script.run(calls)
            for answer in answers:
                if isinstance(answer, Exception):
                    raise answer
        except (RedisError, OSError) as exc:
            log.warning("rate_limit_unavailable", error=type(exc).__name__)
            return None
        for limit, waited in zip(limits, answers, strict=True):
            if int(waited):
                return Refusal(limit.scope, limit.per_window, int(waited))
        return None
