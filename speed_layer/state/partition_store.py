"""Where a partition's counter state lives in Redis, all under the partition's hash tag (one Redis
Cluster slot): its owner generation, its committed offset, its changelog, and its snapshot as a
list of chunks (`speed_layer/state/snapshot.py`; a single value, `snapshot`, before). `commit.lua`
commits a micro-batch and, with it, a chunk of a snapshot being built; restoring reads the
snapshot and the changelog back into a `PartitionState`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
import zstandard

from counting import keys
from counting.redisconn import eval_each
from counting.values import UnknownLayout
from speed_layer.state.partition import Entry, PartitionState

LUA = Path(__file__).with_name("commit.lua").read_text()
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(dict[str, Any])
_entry_decoder = msgspec.msgpack.Decoder(Entry)

COMMITTED, ALREADY, FENCED = 1, 0, -1

# The served offset only moves forward: a fenced owner's late write must not move it back.
RAISE = """if tonumber(redis.call('GET', KEYS[1]) or '-1') < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end"""


# Changelog entries and snapshots are stored compressed (Zstandard's fastest level: about a third of
# the msgpack bytes, at some 300 MB/s); a value written before, plain msgpack, still reads.


class _Zstd(threading.local):
    """A compressor and a decompressor per thread: a Zstandard context is not thread safe (the
    worker compresses a snapshot in a thread while its loop compresses the next changelog entries;
    sharing one context crashed the process with a segmentation fault)."""

    def __init__(self) -> None:
        self.compress = zstandard.ZstdCompressor(level=1).compress
        self.decompress = zstandard.ZstdDecompressor().decompress


_zstd = _Zstd()
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def encode(entry: dict[str, object]) -> bytes:
    return compress(packed(entry))


def packed(entry: dict[str, object]) -> bytes:
    """An entry in msgpack, to `compress` later (a snapshot: off the event loop)."""
    return _encoder.encode(entry)


def compress(raw: bytes) -> bytes:
    """What `encode` stores of a `packed` entry (Zstandard releases the GIL while it compresses)."""
    return _zstd.compress(raw)


def decode(raw: bytes) -> dict[str, Any]:
    return _decoder.decode(_zstd.decompress(raw) if raw.startswith(_ZSTD_MAGIC) else raw)


def decode_entry(raw: bytes, what: str) -> Entry:
    """A changelog entry or snapshot, typed as `state.Entry` (decoded straight into the tables'
    values: about three times faster than plain msgpack, which restoring is mostly made of)."""
    plain = _zstd.decompress(raw) if raw.startswith(_ZSTD_MAGIC) else raw
    try:
        return _entry_decoder.decode(plain)
    except msgspec.ValidationError as exc:
        raise UnknownLayout(
            what,
            plain,
            f"state.Entry: {exc}",
            "stop the counter, run `tally speed rebuild --replace` (it counts the archived log into "
            "a new state), then start the counter again",
        ) from None


_PARTS = ("offset", "owner", "log", "snapshot", "sketches", "chunks", "chunks:next", "chunks:mark")
# What commit.lua answers of a batch's snapshot chunk: refused (not the next one of the build: a
# build begun by an earlier commit that did not store it), stored, or stored as the last one.
CHUNK_REFUSED, CHUNK_STORED, SNAPSHOT_SWITCHED = 0, 1, 2


def _keys(topic: str, partition: int) -> list[str]:
    return [keys.partition_state(topic, partition, p) for p in _PARTS]


@dataclass
class Chunk:
    """A chunk of a snapshot being built, committed with a batch: its index in the build, its
    bytes (msgpack when planned, compressed by the write) and whether it is the last."""

    index: int
    data: bytes
    last: bool


async def committed_partitions(client: aioredis.Redis, topic: str, partitions: int) -> list[int]:
    """The partitions of `topic` with a committed state in Redis. A partition's state is committed
    before its counts are sunk, so speed counts with none of these came from elsewhere, or the
    states were lost."""
    return await _partitions_with(
        client, [keys.partition_state(topic, p, "offset") for p in range(partitions)]
    )


async def _partitions_with(client: aioredis.Redis, names: list[str]) -> list[int]:
    """The indexes of the keys in `names` that exist (a partition's key each)."""
    async with client.pipeline(transaction=False) as pipe:  # one EXISTS each: many slots on a cluster
        for name in names:
            pipe.exists(name)
        found = await pipe.execute()
    return [p for p, n in enumerate(found) if n]


def earlier_offset(topic: str, partition: int) -> str:
    """Where the Redis-state counter, deleted on 2026-11-28, kept a partition's offset: its key in
    Redis means that counter's counts and state are there, which this counter does not read."""
    return f"{keys.PREFIX}:offsets:{topic}:{partition}"


async def earlier_counter_partitions(client: aioredis.Redis, topic: str, partitions: int) -> list[int]:
    """The partitions of `topic` whose offset the earlier Redis-state counter left in Redis."""
    return await _partitions_with(client, [earlier_offset(topic, p) for p in range(partitions)])


class PartitionStore:
    """Claims, restores and commits partitions of one topic."""

    def __init__(self, client: aioredis.Redis, topic: str) -> None:
        self._client = client
        self._topic = topic

    async def claim(self, partitions: list[int]) -> dict[int, int]:
        """Become the owner of partitions: raise each one's owner generation, so commits of an
        earlier owner, still in flight, are refused from now on."""
        async with self._client.pipeline(transaction=False) as pipe:
            for partition in partitions:
                pipe.incr(keys.partition_state(self._topic, partition, "owner"))
            generations = await pipe.execute()
        return {p: int(g) for p, g in zip(partitions, generations, strict=True)}

    async def owners(self, partitions: list[int]) -> dict[int, int]:
        """The owner generation of each partition now (0: never claimed)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for partition in partitions:
                pipe.get(keys.partition_state(self._topic, partition, "owner"))
            found = await pipe.execute()
        return {p: int(g or 0) for p, g in zip(partitions, found, strict=True)}

    async def restore(self, partition: int, state: PartitionState) -> dict[str, Any] | None:
        """Load the partition's snapshot (its chunks, or the single value an earlier version wrote)
        and changelog into `state`; return the last entry (the one whose counts may not have
        reached the read keys yet), None when nothing was committed."""
        _, _, log, snapshot, sketches, chunks, _, _ = _keys(self._topic, partition)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.get(snapshot)
            pipe.lrange(chunks, 0, -1)
            pipe.lrange(log, 0, -1)
            pipe.get(sketches)
            raw_snapshot, raw_chunks, raw_entries, raw_sketches = await pipe.execute()
        if raw_snapshot is not None:
            state.load(decode_entry(raw_snapshot, f"the snapshot of partition {partition}"))
        for n, raw in enumerate(raw_chunks):
            state.load(decode_entry(raw, f"the snapshot of partition {partition} (chunk {n})"))
        last: Entry | None = None
        for raw in raw_entries:
            last = decode_entry(raw, f"a changelog entry of partition {partition}")
            state.load(last)
        if last is not None and raw_sketches is not None:
            last["sketches"] = decode(raw_sketches)
        return cast(dict[str, Any] | None, last)

    async def mark_sunk(self, offsets: dict[int, int]) -> None:
        """Record, per partition, the last offset whose counts reached the read keys (what readers
        that wait for the counter look at: `keys.counter_offset`)."""
        calls = [(keys.partition_state(self._topic, p, "sunk"), [o]) for p, o in offsets.items() if o >= 0]
        for answer in await eval_each(self._client, RAISE, calls):
            if isinstance(answer, Exception):
                raise answer

    async def commit(
        self, commits: list[tuple[int, int, int, bytes, bytes, bool, Chunk | None]]
    ) -> list[tuple[int, int, int]]:
        """Commit entries, one per (partition, generation, last offset, entry, sketch digests,
        whether the offset may stay where it is, snapshot chunk or None), in one pipeline; answer
        (COMMITTED, ALREADY or FENCED, the offset or owner, what became of the chunk: CHUNK_REFUSED
        when there was none) for each."""
        calls = []
        for partition, generation, last, entry, sketches, same_offset, chunk in commits:
            offset, owner, log, snap, sketch_key, chunks, building, mark = _keys(self._topic, partition)
            args: list[Any] = [owner, log, snap, sketch_key, generation, last, entry, sketches]
            args += ["1" if same_offset else "0", chunks, building, mark]
            if chunk is not None:
                args += [chunk.index, "1" if chunk.last else "0", chunk.data]
            calls.append((offset, args))
        answers = await eval_each(self._client, LUA, calls)
        found = []
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
            stored = int(answer[2]) if len(answer) > 2 else CHUNK_REFUSED
            found.append((int(answer[0]), int(answer[1]), stored))
        return found
