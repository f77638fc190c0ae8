"""The one way every Tally process opens Redis: a single server, or a Redis Cluster when
`TALLY_REDIS_CLUSTER=1` (then `TALLY_REDIS_URL` names any node; the client learns the others and
sends each command to the node that holds its key's slot)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from counting.settings import Settings

# What both clients offer that Tally uses (commands, pipelines, scripts): the cluster clients are
# not subclasses of the single-server ones, so code that takes either is typed with these.
SyncRedis = redis.Redis
AsyncRedis = aioredis.Redis


def sync_client(settings: Settings, **options: Any) -> SyncRedis:
    """A blocking client of the configured Redis (`options` are redis-py's connection options)."""
    if settings.redis_cluster:
        cluster: Any = redis.RedisCluster.from_url(settings.redis_url, **options)
        return cluster  # type: ignore[no-any-return]
    return redis.Redis.from_url(settings.redis_url, **options)


class HiredisPackedConnection(aioredis.Connection):
    """redis-py's asyncio connection with its commands packed by hiredis, in C, as redis-py's
    blocking client packs them when hiredis is installed (the asyncio one packs in Python: about
    0.6 µs an argument against 0.12, which a sink write of thousands of viewers and sessions
    pays per argument). What hiredis refuses (a bool, None) and command names of several words are
    left to redis-py, which packs them or names the bad value as before."""

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (b" " if isinstance(name, bytes) else " ") in name:
            return super().pack_command(*args)
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack_command(*args)


def async_client(settings: Settings, **options: Any) -> AsyncRedis:
    """An asyncio client of the configured Redis (`options` are redis-py's connection options).
    On a single Redis its commands are packed by hiredis (`HiredisPackedConnection`); redis-py's
    asyncio cluster client builds its connections itself, with redis-py's own packing."""
    if settings.redis_cluster:
        cluster: Any = aioredis.RedisCluster.from_url(settings.redis_url, **options)
        return cluster  # type: ignore[no-any-return]
    options.setdefault("connection_class", HiredisPackedConnection)
    return aioredis.Redis.from_url(settings.redis_url, **options)


# One call of a one-key script: its key and its arguments.
ScriptCall = tuple[str, Sequence[str | int | float | bytes]]


async def eval_each(client: AsyncRedis, source: str, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run a one-key Lua script once per call, all calls in one pipeline (not a transaction: on a
    Redis Cluster each goes to the node of its key's slot), loading the script where it is missing
    (a new or restarted Redis), so the script must be safe to run twice. Answers in order; an error
    answer is returned as its exception."""
    sha = hashlib.sha1(source.encode()).hexdigest()
    answers = await _eval_pipelined(client, sha, calls)
    if any(isinstance(answer, NoScriptError) for answer in answers):
        await client.script_load(source)
        answers = await _eval_pipelined(client, sha, calls)
    return answers


async def _eval_pipelined(client: AsyncRedis, sha: str, calls: Sequence[ScriptCall]) -> list[Any]:
    async with client.pipeline(transaction=False) as pipe:
        for key, args in calls:
            # The command, not pipe.evalsha: redis-py's cluster pipeline refuses that method, while
            # the command is routed by its one key on a cluster as on a single Redis.
            pipe.execute_command("EVALSHA", sha, 1, key, *args)
        return cast(list[Any], await pipe.execute(raise_on_error=False))
