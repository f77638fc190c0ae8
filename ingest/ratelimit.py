"""Sliding-window rate limits kept in Redis: at most N requests per key in the last window."""

from __future__ import annotations

import logging
import time
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from counting import keys

log = logging.getLogger("tally.ingest.ratelimit")

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


class RateLimiter:
    """Admits requests per key (an address, a user) within a limit per sliding minute.

    When Redis is unreachable the request is admitted and a warning logged: writes are worth more
    than the limit, and the broker, not Redis, is what an acknowledgement depends on.
    """

    def __init__(self, redis: Redis, window_ms: int = 60_000) -> None:
        self._script = redis.register_script(_ADMIT)
        self._window = window_ms

    async def retry_after_ms(self, scope: str, subject: str, limit: int) -> int:
        """0 when admitted; else how long to wait before the next request may pass."""
        now = time.time_ns() // 1_000_000
        try:
            waited = await self._script(
                keys=[keys.rate_window(scope, subject)], args=[now, self._window, limit, uuid.uuid4().hex]
            )
        except (RedisError, OSError) as exc:
            log.warning("event=rate_limit_unavailable scope=%s error=%s", scope, type(exc).__name__)
            return 0
        return int(waited)
