"""The asyncio client's connection that packs commands with hiredis: the same bytes as redis-py's
own packing, the same refusal of what redis-py refuses, and a real Redis that answers it."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from counting.redisconn import HiredisPackedConnection, async_client
from counting.settings import Settings

COMMANDS = [
    ("SET", "key", "é"),
    ("HSET", "tally:{v}:viewers", "0123abcd", 29_000_000, b"\x00\xff", -3),
    ("ZADD", "tally:{v}:presence", "GT", 1_764_000_000_000, "s-u1", 0.1, "s-u2", 1e20, "s-u3"),
    ("PEXPIREAT", "k", 2**70),
    ("EVALSHA", "a" * 40, 1, "k", memoryview(b"packed")),
    ("CONFIG GET", "maxmemory"),
    (b"CLIENT SETNAME", b"tally"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[str(c[0]) for c in COMMANDS])
def test_a_command_is_packed_as_redis_py_packs_it(command: tuple[object, ...]) -> None:
    packed = b"".join(HiredisPackedConnection().pack_command(*command))
    assert packed == b"".join(aioredis.Connection().pack_command(*command))


@pytest.mark.parametrize("bad", [True, None, [1]])
def test_what_redis_py_refuses_is_refused_naming_its_type(bad: object) -> None:
    with pytest.raises(DataError, match=type(bad).__name__):
        HiredisPackedConnection().pack_command("SET", "key", bad)


@pytest.mark.integration
async def test_a_single_redis_client_packs_with_hiredis_and_is_answered(redis_url: str) -> None:
    client = async_client(Settings(redis_url=redis_url))
    try:
        assert client.connection_pool.connection_class is HiredisPackedConnection
        key = "tally:test:redisconn"
        assert await client.execute_command("HSET", key, "a", 1, "b", 2.5) == 2
        assert await client.hgetall(key) == {b"a": b"1", b"b": b"2.5"}
        await client.delete(key)
    finally:
        await client.aclose()
