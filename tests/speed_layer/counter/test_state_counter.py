"""The counter with its state in the worker, against a real Redis (and a real Redis Cluster): the
read keys it sinks equal the oracle at every bucket edge, replays and kills at any moment (between
the commit and the sink too) lose and double nothing, a restore gives back the state, and a
partition's old owner is fenced out (the kills and the fencing on both kinds of Redis)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import msgspec
import pytest
import redis
import redis.asyncio as aioredis
import zstandard

from counting import bots, keys, oracle, rules
from counting.event import Event
from counting.redisconn import async_client
from counting.settings import Settings
from counting.values import ShardPlan, UnknownLayout, decode_shard_plan
from counting.wire import encode_events, partition_for, record_key
from ingest.publisher import shard_for
from serving_layer.reactions import read_user_reaction
from serving_layer.speed import read_speed, unique_viewers_between
from speed_layer.archiver.archiver import ParquetLog
from speed_layer.counter import state_counter
from speed_layer.counter.handoff import home_of
from speed_layer.counter.rebuild import rebuild
from speed_layer.counter.state_counter import StateCounter
from speed_layer.counter.stream import PlannedBatch
from speed_layer.errors import EarlierCounterState, RebuildRefused
from speed_layer.records import Record
from speed_layer.sink import sink
from speed_layer.state import snapshot
from speed_layer.state.counted_views import WINDOW
from speed_layer.state.firsts import RECORD
from speed_layer.state.partition import EXACT_VIEWERS_LIMIT, ROW_TABLES, TABLES, PartitionState
from speed_layer.state.partition_store import (
    CHUNK_REFUSED,
    CHUNK_STORED,
    COMMITTED,
    SNAPSHOT_SWITCHED,
    Chunk,
    PartitionStore,
    earlier_offset,
    encode,
)
from speed_layer.state.presence import RECORD as SESSION_RECORD
from speed_layer.state.seen import ROW
from tests.speed_layer.helpers import OnRedis, Traffic, no_dead_letters, pack, speed_counts

pytestmark = pytest.mark.integration

PARTITIONS = 3
T0 = 1_800_000_000_000  # on a bucket edge of the tests' 2 s buckets


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The tests' settings on a topic of PARTITIONS partitions, as the records are packed."""
    return settings.model_copy(update={"topic_partitions": PARTITIONS})


async def _worker(settings: Settings, client: aioredis.Redis, partitions: int = PARTITIONS) -> StateCounter:
    worker = StateCounter(settings, client, no_dead_letters)
    await worker.claim(settings.events_topic, list(range(partitions)))
    return worker


async def _count(
    settings: Settings, client: aioredis.Redis, records: list[Record], batch: int = 7
) -> StateCounter:
    worker = await _worker(settings, client)
    for start in range(0, len(records), batch):
        await worker.handle(records[start : start + batch])
    return worker


def _at_every_edge(client: redis.Redis, settings: Settings, events: list[Event]) -> None:
    buckets = sorted({rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in events})
    for bucket in [*buckets, buckets[-1] + 1]:
        expected = oracle.count(events, cutoff=bucket * settings.bucket_ms)
        actual = {video: speed_counts(client, video, below_bucket=bucket) for video in expected}
        assert actual == expected, f"split at bucket {bucket}"


def _out_of_order(records: list[Record], rng: random.Random) -> list[Record]:
    """Each partition's records with neighbours swapped now and then (ingest processes append out of
    time order), offsets renumbered in the new order."""
    out: list[Record] = []
    for partition in sorted({r.partition for r in records}):
        mine = [r for r in records if r.partition == partition]
        for i in range(len(mine) - 1):
            if rng.random() < 0.2:
                mine[i], mine[i + 1] = mine[i + 1], mine[i]
        out += [Record(r.topic, r.partition, offset, r.value) for offset, r in enumerate(mine)]
    return out


@pytest.mark.parametrize("call_bytes", [sink.CALL_BYTES, 1], ids=["many-videos-a-call", "one-video-a-call"])
@pytest.mark.parametrize(
    "plain_from", [sink.PLAIN_COMMANDS_FROM, 1, 10**9], ids=["plain-when-many", "all-plain", "all-by-script"]
)
async def test_counts_equal_the_oracle_at_every_bucket_edge(
    settings: Settings,
    aclient: aioredis.Redis,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    call_bytes: int,
    plain_from: int,
) -> None:
    monkeypatch.setattr(sink, "CALL_BYTES", call_bytes)  # one video a call: as on a Redis Cluster
    monkeypatch.setattr(sink, "PLAIN_COMMANDS_FROM", plain_from)  # a video's per-event writes
    # From a bucket edge of now: the same events fall in the same buckets whenever the test runs.
    edge = int(time.time() * 1000) // settings.bucket_ms * settings.bucket_ms
    events = Traffic(seed=41, now_ms=edge, step_ms=40).mixed(n=700)
    assert len({e.event_id for e in events}) < len(events)  # retries present
    expected = oracle.count(events)
    assert sum(c.repeat_views for c in expected.values()) and sum(c.short_views for c in expected.values())
    assert sum(c.likes + c.dislikes for c in expected.values())
    await _count(settings, aclient, _out_of_order(pack(events, PARTITIONS, per_record=3), random.Random(4)))

    _at_every_edge(redis_client, settings, events)
    assert {m.decode() for m in redis_client.smembers(keys.videos_index())} == set(expected)
    video = max(expected, key=lambda v: expected[v].views)
    served = await read_speed(aclient, video, 0, max(e.ingest_ts or 0 for e in events))
    assert (served.views, served.likes, served.unique_viewers) == (
        expected[video].views,
        expected[video].likes,
        expected[video].unique_viewers,
    )
    for bucket in {rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in events}:
        platform = {k.decode(): int(v) for k, v in redis_client.hgetall(keys.platform(bucket)).items()}
        arrived = [e for e in events if rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) == bucket]
        assert platform["events"] == len(arrived)  # every event of every type, copies included
        views = [redis_client.hget(keys.bucket_counts(v, bucket), "views") for v in expected]
        assert platform.get("views", 0) == sum(int(n) for n in views if n is not None)
    top = redis_client.zrevrange(
        keys.trending(rules.bucket_of(events[-1].ingest_ts or 0, settings.bucket_ms)), 0, -1
    )
    assert top, "the last bucket's views reached trending"
    # What the per-event writes hold (by script or by plain command), as the serving layer reads it.
    now = max(e.ingest_ts or 0 for e in events)
    watching = oracle.watching_now(events, now)
    assert watching
    for v in expected:
        assert (await read_speed(aclient, v, 0, now)).watching_now == watching.get(v, 0), v
    liked = oracle.reactions(events)
    assert liked
    for (user, v), state in liked.items():
        assert (await read_user_reaction(aclient, v, user))[0] == state, (user, v)
    buckets = [rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in events]
    for v in expected:  # the bucket sketches hold the counted viewers: a sketch of those counts alike
        digests = {
            rules.viewer_digest(rules.viewer_of(e)) for e in oracle.counted_views(events) if e.video_id == v
        }
        redis_client.pfadd("test:expected", *digests)
        alike = redis_client.pfcount("test:expected")
        redis_client.delete("test:expected")
        assert await unique_viewers_between(aclient, v, min(buckets), max(buckets)) == alike, v


async def test_replayed_records_change_nothing(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=42).mixed(n=400)
    records = pack(events, PARTITIONS)
    worker = await _count(settings, aclient, records)
    before = {v: speed_counts(redis_client, v) for v in oracle.count(events)}
    report = await worker.handle(records)  # the broker delivers them again
    assert report.applied == 0 and report.skipped == len(records)
    again = await _worker(settings, aclient)  # a new owner restores, then gets them again
    report = await again.handle(records)
    assert report.applied == 0 and report.skipped == len(records)
    assert {v: speed_counts(redis_client, v) for v in before} == before == oracle.count(events)


async def test_a_burst_whose_event_time_lags_the_others_is_held_to_the_velocity_limit(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """Views of other videos an hour back, then 200 views of one video from one address within 8 s,
    three hours back: the burst is judged on its own window and held to the velocity limit (it was
    counted whole, its minutes older than those kept behind the newest one seen). The batch, which
    sees the whole window, rejects all 200."""
    t = Traffic(seed=43, now_ms=T0)
    others = [t.view(f"o{i % 20}", f"u{i}", ts=T0 - rules.HOUR_MS + i * 100) for i in range(500)]
    start = T0 - 3 * rules.HOUR_MS
    burst = [t.view("burst", f"b{i}", ip="203.0.113.7", ts=start + i * 40) for i in range(200)]
    limit = bots.shipped().max_views_per_address_minute
    await _count(settings, aclient, pack(others + burst, PARTITIONS, per_record=5), batch=10)
    served = speed_counts(redis_client, "burst")
    held = (limit, limit, {"address_velocity": 200 - limit})
    assert (served.views, served.unique_viewers, served.rejected) == held
    assert oracle.count(others + burst)["burst"].rejected == {"address_velocity": 200}
    for video, counts in oracle.count(others).items():  # the other videos, every view human
        assert speed_counts(redis_client, video) == counts, video


async def test_the_state_of_the_earlier_redis_state_counter_is_refused_naming_the_rebuild(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, broker: str
) -> None:
    # The offset that counter (deleted on 2026-11-28) kept for a partition: no writer of it is left,
    # so it is typed here.
    redis_client.set(earlier_offset(settings.events_topic, 1), 41)

    with pytest.raises(EarlierCounterState, match=r"partitions \[1\].*speed rebuild --replace"):
        await _worker(settings, aclient)
    # What the error says: the key is gone with it. (The rebuild reads the broker past the archive;
    # the topic is not there.)
    await rebuild(settings.model_copy(update={"kafka_bootstrap": broker}), aclient, replace=True)
    await _worker(settings, aclient)


async def test_every_bucket_sketch_and_trending_key_expires(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=9, step_ms=30).mixed(n=600)
    # Many small batches: later batches write keys whose expiry was set before.
    await _count(settings, aclient, pack(events, PARTITIONS), batch=3)
    lasting = (":viewers", ":reactions", ":buckets", ":shards", "tally:videos", "tally:{p:")
    names = [k.decode() for k in redis_client.scan_iter(match="tally:*", count=1000)]
    expiring = [k for k in names if not any(part in k for part in lasting)]
    assert {k.split(":")[2] for k in expiring} >= {"b", "hll"}
    assert any(k.startswith(keys.trending(0).removesuffix("0")) for k in expiring)
    assert [k for k in expiring if redis_client.pttl(k) <= 0] == []


def _offsets(client: redis.Redis, settings: Settings) -> tuple[dict[int, int], dict[int, int]]:
    """Each partition's committed offset, and the offset whose counts the read keys hold."""
    topic = settings.events_topic

    def offsets(key: Callable[[int], str]) -> dict[int, int]:
        return {p: int(client.get(key(p)) or -1) for p in range(PARTITIONS)}

    return offsets(lambda p: keys.partition_state(topic, p, "offset")), offsets(
        lambda p: keys.counter_offset(topic, p)
    )


class Killed(Exception):
    """The worker process died here."""


async def test_workers_killed_at_random_moments_lose_and_double_nothing(
    settings: Settings, on_redis: OnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, redis_client = on_redis.apply(settings), on_redis.client
    aclient = async_client(settings)
    try:
        await _kill_at_random_moments(settings, aclient, redis_client, monkeypatch)
    finally:
        await aclient.aclose()


async def _kill_at_random_moments(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clean traffic: a new owner starts with empty bot windows (the batch corrects what they miss).
    events = Traffic(seed=43, step_ms=30).clean(n=900)
    records = pack(events, PARTITIONS, per_record=3)
    rng = random.Random(43)
    real_sink = state_counter.sink
    kill_in_sink = False

    async def sink(client: aioredis.Redis, plan: object) -> None:
        if kill_in_sink:
            raise Killed("between the commit and the sink")
        await real_sink(client, plan)  # type: ignore[arg-type]

    monkeypatch.setattr(state_counter, "sink", sink)
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 2_000)  # snapshots along the way,
    _chunks_of(monkeypatch, 30)  # each built over several batches
    worker = await _worker(settings, aclient)
    acked, kills = 0, {"planned": 0, "committed": 0}
    while acked < len(records):
        batch = records[acked : acked + rng.randint(1, 9)]
        planned = worker.plan(batch)
        moment = rng.random()
        if moment < 0.15:  # killed after planning: nothing reached Redis
            kills["planned"] += 1
        elif moment < 0.3:  # killed after the commit, before the counts reached the read keys
            kill_in_sink = True
            try:
                await worker.write(planned)
            except Killed:
                kills["committed"] += 1
                committed, served = _offsets(redis_client, settings)
                assert any(served[p] < committed[p] for p in {r.partition for r in batch})
            else:  # nothing to sink: the batch was committed before (a redelivery)
                acked += len(batch)
                continue
            finally:
                kill_in_sink = False
        else:
            await worker.write(planned)
            acked += len(batch)  # the broker's offsets move only after the write returned
            continue
        worker = await _worker(settings, aclient)  # the next owner restores and sinks the last entry
        committed, served = _offsets(redis_client, settings)
        assert served == committed  # what waits for the counter waits for the read keys

    assert min(kills.values()) >= 5, kills
    _at_every_edge(redis_client, settings, events)


@pytest.mark.parametrize("chunk_entries", [50_000, 40])
async def test_a_restored_state_equals_the_state_it_was_built_from(
    settings: Settings,
    aclient: aioredis.Redis,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    chunk_entries: int,
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    _chunks_of(monkeypatch, chunk_entries)  # a snapshot in one batch or many
    records = pack(Traffic(seed=44).mixed(n=1_500), PARTITIONS)
    worker = await _worker(settings, aclient)
    restored_mid_build = False
    for start in range(0, len(records), 7):
        await worker.handle(records[start : start + 7])
        building = [o.build for o in worker.owned.values() if o.build is not None]
        if not restored_mid_build and any(b.chunks >= 2 and not b.planned_all for b in building):
            # The next owner restores while a build is half stored, then counts on.
            worker, restored_mid_build = await _restored_equals(settings, aclient, worker), True
    assert restored_mid_build or chunk_entries == 50_000
    assert any(_stored(redis_client, settings, p, "chunks") for p in range(PARTITIONS)), "a snapshot"
    await _restored_equals(settings, aclient, worker)


async def _restored_equals(settings: Settings, aclient: aioredis.Redis, worker: StateCounter) -> StateCounter:
    """A new owner of every partition, whose restored state equals `worker`'s."""
    restored = await _worker(settings, aclient)
    for partition in range(PARTITIONS):
        mine, theirs = worker.owned[partition].state, restored.owned[partition].state
        assert theirs.offset == mine.offset
        _same_tables(theirs, mine)
        assert theirs.viewers_of == mine.viewers_of
    return restored


def _same_tables(theirs: PartitionState, mine: PartitionState) -> None:
    for table in TABLES:
        if table in ROW_TABLES:
            assert sorted(getattr(theirs, table).items()) == sorted(getattr(mine, table).items()), table
        else:
            assert getattr(theirs, table) == getattr(mine, table), table


def _chunks_of(monkeypatch: pytest.MonkeyPatch, entries: int) -> None:
    """Snapshot chunks of `entries` entries a batch, whatever its size."""
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES", entries)
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES_AN_EVENT", 0)


async def test_a_batch_encodes_snapshot_chunks_of_its_budget_of_entries_at_most(
    settings: Settings, aclient: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 1_000)
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES", 25)
    monkeypatch.setattr(snapshot, "CHUNK_ENTRIES_AN_EVENT", 2)
    records = pack(Traffic(seed=52).mixed(n=1_200), PARTITIONS)
    worker = await _worker(settings, aclient)
    chunked = set()
    for start in range(0, len(records), 5):
        planned = worker.plan(records[start : start + 5])
        commits = planned.plan.commits  # type: ignore[attr-defined]
        events = sum(c.events for c in commits)
        entries = 0
        for c in commits:
            if c.chunk is not None:
                chunk = msgspec.msgpack.decode(c.chunk.data)
                entries += len(chunk["seen"]) // ROW.itemsize  # markers: `ROW` records
                entries += len(chunk["windows"]) // WINDOW.itemsize  # windows: `WINDOW` records
                entries += len(chunk["firsts"][1]) // RECORD.itemsize  # first buckets: `firsts.RECORD`s
                entries += len(chunk["sessions"][1]) // SESSION_RECORD.itemsize  # sessions
                entries += sum(len(chunk[table]) for table in TABLES if table not in ROW_TABLES)
                chunked.add(c.partition)
        assert entries <= max(25, 2 * events), (entries, events)
        await worker.write(planned)
    assert chunked == set(range(PARTITIONS)), "every partition's build had its turns"


def _stored(redis_client: redis.Redis, settings: Settings, partition: int, part: str) -> list[bytes]:
    """A list of a partition's state as stored (its changelog, or its snapshot's chunks)."""
    return redis_client.lrange(keys.partition_state(settings.events_topic, partition, part), 0, -1)  # type: ignore[return-value]


async def test_a_snapshot_built_over_many_batches_replaces_the_changelog_before_it(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    _chunks_of(monkeypatch, 100)
    events = Traffic(seed=49, now_ms=T0).mixed(n=900)
    records = pack(events, PARTITIONS)
    worker = await _worker(settings, aclient)
    batches, switched, entries_since = 0, 0, 0  # partition 0's entries since its build began
    logged = 0  # partition 0's changelog entries kept: all of them until a build switches
    for start in range(0, len(records), 7):
        batch = records[start : start + 7]
        before = worker.owned[0].build
        await worker.handle(batch)
        batches += 1
        after = worker.owned[0].build
        committed = any(r.partition == 0 for r in batch)
        entries_since = 1 if before is None else entries_since + committed
        logged += committed
        if before is not None and after is None:
            switched += 1
            logged = entries_since
            # What a restore reads after the chunks: the changelog from the build's first batch on.
            assert len(_stored(redis_client, settings, 0, "log")) == entries_since >= before.chunks > 1
            chunks = _stored(redis_client, settings, 0, "chunks")
            assert len(chunks) == before.chunks
            assert worker.owned[0].snapshot_bytes == sum(map(len, chunks))
            assert not redis_client.exists(keys.partition_state(settings.events_topic, 0, "chunks:next"))
    assert switched >= 2, switched
    # The entries before the last switched build's first batch are gone; those since are kept. (Where
    # the run ends within a build's span, so how many are left, moves with the entries' compressed
    # sizes, which move with the order Python's per-process string hashing gives a set of keys.)
    assert len(_stored(redis_client, settings, 0, "log")) == logged < batches
    _at_every_edge(redis_client, settings, events)


async def test_a_chunk_that_is_not_the_next_of_its_build_is_refused(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    store = PartitionStore(aclient, settings.events_topic)
    generation = (await store.claim([0]))[0]
    entry = encode({"offset": 0})

    answers = await store.commit(
        [
            (0, generation, 0, entry, b"", False, Chunk(0, b"first", False)),
            (0, generation, 1, entry, b"", False, Chunk(2, b"a chunk after a lost one", True)),
            (0, generation, 2, entry, b"", False, Chunk(1, b"second", True)),
        ]
    )

    assert answers == [
        (COMMITTED, 0, CHUNK_STORED),
        (COMMITTED, 1, CHUNK_REFUSED),
        (COMMITTED, 2, SNAPSHOT_SWITCHED),
    ]
    assert _stored(redis_client, settings, 0, "chunks") == [b"first", b"second"]
    assert len(_stored(redis_client, settings, 0, "log")) == 3  # from the build's first batch's entry on


async def test_a_snapshot_is_stored_compressed_and_the_next_is_due_by_its_stored_size(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    worker = await _count(settings, aclient, pack(Traffic(seed=47).mixed(n=600), PARTITIONS))
    snapshots = 0
    for partition, owned in worker.owned.items():
        stored = _stored(redis_client, settings, partition, "chunks")
        if stored and owned.build is None:
            snapshots += 1
            assert all(chunk.startswith(b"\x28\xb5\x2f\xfd") for chunk in stored)  # Zstandard's frames
            assert owned.snapshot_bytes == sum(map(len, stored))  # compared with the changelog's stored bytes
    assert snapshots > 0


# The layouts before fixed-width rows: a marker as video SEP event id -> [ingest_ts, verdict, route],
# a window's counted view as video SEP viewer SEP window -> [ingest_ts, event id], a viewer's first
# bucket as video SEP viewer digest -> bucket.
EARLIER_LAYOUTS = {
    "seen": lambda n: {f"v1\x1fe{n}": [n, "v", 0]},
    "windows": lambda n: {f"v1\x1fu{n}\x1f{n // 1_800_000}": [n, f"e{n}"]},
    "firsts": lambda n: {f"v1\x1f{n:016x}": n},
}


@pytest.mark.parametrize("table", sorted(EARLIER_LAYOUTS))
async def test_a_snapshot_of_another_layout_is_refused_naming_the_partition(
    table: str,
    settings: Settings,
    aclient: aioredis.Redis,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    await _count(settings, aclient, pack(Traffic(seed=45).mixed(n=600), PARTITIONS))
    chunks = keys.partition_state(settings.events_topic, 0, "chunks")
    stored = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(redis_client.lindex(chunks, 0)))
    stored[table] = EARLIER_LAYOUTS[table](7)
    redis_client.lset(chunks, 0, msgspec.msgpack.encode(stored))

    refused = rf"the snapshot of partition 0 \(chunk 0\).*\$\.{table}.*tally speed rebuild --replace"
    with pytest.raises(UnknownLayout, match=refused):
        await _worker(settings, aclient)


async def test_a_state_stored_plain_by_an_earlier_version_restores(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    worker = await _count(settings, aclient, pack(Traffic(seed=46).mixed(n=400), PARTITIONS))
    for partition in range(PARTITIONS):  # what an earlier version wrote: the same msgpack, not compressed
        for part in ("chunks", "log"):
            key = keys.partition_state(settings.events_topic, partition, part)
            stored = redis_client.lrange(key, 0, -1)
            assert all(raw.startswith(b"\x28\xb5\x2f\xfd") for raw in stored), "stored compressed"
            plain = [zstandard.ZstdDecompressor().decompress(raw) for raw in stored]
            assert all(len(p) > len(raw) for p, raw in zip(plain, stored, strict=True))
            redis_client.delete(key)
            if plain:
                redis_client.rpush(key, *plain)
    restored = await _worker(settings, aclient)
    for partition in range(PARTITIONS):
        mine, theirs = worker.owned[partition].state, restored.owned[partition].state
        assert theirs.offset == mine.offset
        _same_tables(theirs, mine)


async def test_a_whole_snapshot_of_an_earlier_version_restores_and_the_next_build_replaces_it(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_counter, "MIN_LOG_BYTES", 3_000)
    _chunks_of(monkeypatch, 200)
    records = pack(Traffic(seed=50).mixed(n=1_200), PARTITIONS)
    half = len(records) // 2
    worker = await _count(settings, aclient, records[:half])
    for partition, owned in worker.owned.items():  # as an earlier version stored it: one value, no log
        for part in ("chunks", "chunks:next", "chunks:mark", "log"):
            redis_client.delete(keys.partition_state(settings.events_topic, partition, part))
        whole = encode(owned.state.snapshot())
        redis_client.set(keys.partition_state(settings.events_topic, partition, "snapshot"), whole)
    restored = await _worker(settings, aclient)
    for partition in range(PARTITIONS):
        mine, theirs = worker.owned[partition].state, restored.owned[partition].state
        _same_tables(theirs, mine)

    for start in range(half, len(records), 7):
        await restored.handle(records[start : start + 7])

    switched = [p for p in range(PARTITIONS) if _stored(redis_client, settings, p, "chunks")]
    assert switched, "a build completed"
    for partition in switched:
        assert not redis_client.exists(keys.partition_state(settings.events_topic, partition, "snapshot"))
    again = await _worker(settings, aclient)
    for partition in range(PARTITIONS):
        mine, theirs = restored.owned[partition].state, again.owned[partition].state
        _same_tables(theirs, mine)


async def test_a_partitions_old_owner_is_fenced_out(settings: Settings, on_redis: OnRedis) -> None:
    settings, redis_client = on_redis.apply(settings), on_redis.client
    aclient = async_client(settings)
    try:
        await _fence_out_an_old_owner(settings, aclient, redis_client)
    finally:
        await aclient.aclose()


async def _fence_out_an_old_owner(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = Traffic(seed=45).mixed(n=300)
    records = pack(events, PARTITIONS)
    half = len(records) // 2
    old = await _count(settings, aclient, records[:half])
    planned = old.plan(records[half:])
    new = await _worker(settings, aclient)  # a rebalance: the partitions move
    report = await old.write(planned)
    assert report.fenced == {
        (settings.events_topic, p) for p in range(PARTITIONS) if any(r.partition == p for r in records[half:])
    }
    assert not old.owned, "the old owner dropped the partitions it lost"
    counted = [e for r in records[:half] for e in Traffic.decode(r)]
    assert {v: speed_counts(redis_client, v) for v in oracle.count(counted)} == oracle.count(counted)
    for start in range(half, len(records), 5):
        await new.handle(records[start : start + 5])
    assert {v: speed_counts(redis_client, v) for v in oracle.count(events)} == oracle.count(events)


async def test_counts_equal_the_oracle_on_a_redis_cluster(settings: Settings, redis_cluster_url: str) -> None:
    cluster = redis.RedisCluster.from_url(redis_cluster_url)
    cluster.flushall()
    on_cluster = settings.model_copy(update={"redis_url": redis_cluster_url, "redis_cluster": True})
    client = aioredis.RedisCluster.from_url(redis_cluster_url)
    try:
        events = Traffic(seed=46, step_ms=40).mixed(n=500)
        await _count(on_cluster, client, pack(events, PARTITIONS))
        restored = await _worker(on_cluster, client)
        assert restored.owned[0].state.offset >= 0
        _at_every_edge(cluster, settings, events)  # type: ignore[arg-type]
        for video in {e.video_id for e in events if e.type == "heartbeat"}:
            await _watching_equals_the_oracle(client, video, events)
    finally:
        await client.aclose()
        cluster.flushall()
        cluster.close()


def _route(
    topic: str, events: list[Event], plan: ShardPlan, partitions: int, offsets: dict[int, int]
) -> list[Record]:
    """Records as the ingest API makes them under a video's shard plan (its real routing), up to
    three events a record, offsets following `offsets` (per partition, updated)."""
    by_partition: dict[int, list[Event]] = {}
    for event in events:
        key = record_key(event.video_id, shard_for(event, plan))
        by_partition.setdefault(partition_for(key, partitions), []).append(event)
    records = []
    for partition, mine in sorted(by_partition.items()):
        for start in range(0, len(mine), 3):
            offset = offsets.get(partition, 0)
            offsets[partition] = offset + 1
            records.append(Record(topic, partition, offset, encode_events(mine[start : start + 3])))
    return records


async def _move_a_hot_video(
    hot: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, pipelined: bool = False
) -> tuple[list[Event], list[Record]]:
    """A video gets hot at its home partition, which plans its shards; the viewers that move take
    their retries, windows, first buckets, reactions and sessions watching to their new partition
    (another worker), whose events wait there until the home hands their state over; the home's
    next batch drops the sessions it handed over. Returns the events and every
    record, as counted. `pipelined`: the home plans its next batch (a view of another video it is
    the home of) before the batch that hands the video off is written, as `count_stream` does."""
    partitions = hot.topic_partitions
    home = home_of("viral", partitions)
    now = [0.0]
    at_home = StateCounter(hot, aclient, no_dead_letters, clock=lambda: now[0])
    elsewhere = StateCounter(hot, aclient, no_dead_letters, clock=lambda: now[0])
    await at_home.claim(hot.events_topic, [home])
    await elsewhere.claim(hot.events_topic, [p for p in range(partitions) if p != home])

    traffic = Traffic(seed=47, now_ms=T0, step_ms=30)
    users = [f"u{i}" for i in range(120)]
    before = [traffic.view("viral", traffic.rng.choice(users), ts=T0) for _ in range(200)]
    before += [traffic.event("like", "viral", user_id=u, ts=T0 + i) for i, u in enumerate(users[:40])]
    before += [traffic.view("viral", u, watch=10.0, ts=T0) for u in users[40:50]]  # short views
    # Sessions watching (some left), on a clock of their own so the views' timing stays as it is.
    presence = Traffic(seed=48, now_ms=T0, step_ms=4)
    sessions = [(u, f"s-{u}") for u in users[:100]] + [(None, f"anon{i}") for i in range(20)]
    before += [presence.event("heartbeat", "viral", user_id=u, session_id=s) for u, s in sessions]
    before += [presence.event("leave", "viral", user_id=u, session_id=s) for u, s in sessions[90:100]]
    before.sort(key=lambda e: e.ingest_ts or 0)
    offsets: dict[int, int] = {}
    records = _route(hot.events_topic, before, ShardPlan(), partitions, offsets)
    assert {r.partition for r in records} == {home}
    for second in range(0, 12_000, 1_000):  # the home counts it second by second: it gets hot
        batch = [r for r in records if T0 + second <= _first_ingest(r) < T0 + second + 1_000]
        if batch:
            now[0] = max(e.ingest_ts or 0 for r in batch for e in Traffic.decode(r)) / 1000
            await at_home.handle(batch)
    raw = redis_client.hget(keys.shard_plans(), "viral")
    assert raw is not None, "the home partition planned the hot video's shards"
    plan = decode_shard_plan(raw)
    assert plan.shards == 8 and plan.active_from > T0

    after = [traffic.retry(e) for e in before[:60]]  # retries of events counted at home
    after += [traffic.view("viral", u, ts=T0 + 5) for u in users]  # the same windows: repeats
    after += [traffic.event("unlike", "viral", user_id=u, ts=T0 + 10_000) for u in users[:20]]
    after += [traffic.view("viral", f"new{i}") for i in range(60)]
    traffic.clock = plan.active_from + hot.delivery_timeout_ms  # past the plan, and its grace
    after += [traffic.view("viral", f"late{i}") for i in range(40)]
    # Sessions beat again or leave from where they moved (watching sessions move with them).
    again = sessions[:30] + sessions[100:110]
    after += [traffic.event("heartbeat", "viral", user_id=u, session_id=s) for u, s in again]
    after += [traffic.event("leave", "viral", user_id=u, session_id=s) for u, s in sessions[30:40]]
    moved = _route(hot.events_topic, after, plan, partitions, offsets)
    away = [r for r in moved if r.partition != home]
    assert away and any(r.partition == home for r in moved)
    assert any(e.event_id in {b.event_id for b in before} for r in away for e in Traffic.decode(r))

    now[0] = plan.active_from / 1000
    held = await elsewhere.handle(away)  # before the home handed anything over: they wait
    assert held.applied == 0
    closing = [r for r in moved if r.partition == home]  # past the grace: the hand-off
    if pipelined:
        calm = next(f"calm{i}" for i in range(1_000) if home_of(f"calm{i}", partitions) == home)
        extra = traffic.view(calm, "someone")
        moved.append(Record(hot.events_topic, home, offsets[home], encode_events([extra])))
        offsets[home] += 1
        before.append(extra)
        await at_home.prepare(closing)
        first = at_home.plan(closing)
        second = at_home.plan(moved[-1:])  # planned while the first is not written yet
        await at_home.write(first)
        await at_home.write(second)
    else:
        await at_home.handle(closing)
    assert redis_client.exists(keys.handoff_closed("viral"))
    await elsewhere.handle([])  # takes over, applies what waited, commits it
    await at_home.handle([])  # commits the drop of the sessions handed over
    return before + after, records + moved


async def _watching_equals_the_oracle(aclient: aioredis.Redis, video: str, events: list[Event]) -> None:
    """The sessions watching the video, as the serving layer reads them, at moments from the first
    heartbeat on to past the last one's presence, equal the oracle's."""
    beats = sorted(e.ingest_ts or 0 for e in events if e.type == "heartbeat" and e.video_id == video)
    assert beats
    watched = 0
    for now in range(beats[0], beats[-1] + rules.PRESENCE_MS + 2_000, 1_000):
        expected = oracle.watching_now(events, now).get(video, 0)
        assert (await read_speed(aclient, video, 0, now)).watching_now == expected, now
        watched = max(watched, expected)
    assert watched


async def _after_a_hot_videos_move(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> tuple[Settings, list[Event], ShardPlan, dict[int, int]]:
    """A hot video moved (`_move_a_hot_video`, 4 partitions, up to 8 shards): the settings, the
    events counted, the video's plan as published and each partition's next offset."""
    hot = settings.model_copy(
        update={"topic_partitions": 4, "hot_video_events_per_sec": 20, "max_video_shards": 8}
    )
    events, records = await _move_a_hot_video(hot, aclient, redis_client)
    plan = decode_shard_plan(redis_client.hget(keys.shard_plans(), "viral") or b"")
    offsets: dict[int, int] = {}
    for record in records:
        offsets[record.partition] = max(offsets.get(record.partition, 0), record.offset + 1)
    return hot, events, plan, offsets


def _first_ingest(record: Record) -> int:
    return min(e.ingest_ts or 0 for e in Traffic.decode(record))


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-batch-at-a-time", "next-planned-first"])
async def test_viewers_moving_to_a_hot_videos_shards_are_counted_exactly(
    settings: Settings,
    aclient: aioredis.Redis,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    pipelined: bool,
) -> None:
    hot = settings.model_copy(
        update={"topic_partitions": 4, "hot_video_events_per_sec": 20, "max_video_shards": 8}
    )
    written: list[str] = []
    real_hand_off = state_counter.hand_off

    async def hand_off(client: aioredis.Redis, video: str, moved: dict[int, dict[str, bytes]]) -> None:
        written.append(video)
        await real_hand_off(client, video, moved)

    monkeypatch.setattr(state_counter, "hand_off", hand_off)
    events, _ = await _move_a_hot_video(hot, aclient, redis_client, pipelined)
    assert written == ["viral"]  # once, though the next batch was planned before it was written
    _at_every_edge(redis_client, hot, events)
    await _watching_equals_the_oracle(aclient, "viral", events)
    assert redis_client.hlen(keys.watching("viral")) >= 2, "sessions watch in several partitions"
    restored = await _worker(hot, aclient, hot.topic_partitions)
    assert all(not owned.state.pending for owned in restored.owned.values())


async def test_a_session_that_logs_in_on_a_hot_video_watches_once(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """A session's heartbeats and leave route by the session, not its viewer: one that beats
    anonymously, then as the user it logged in as, stays in one shard of a hot video and is counted
    watching once (by the viewer, most of them would reach two shards and count in both)."""
    hot, events, plan, offsets = await _after_a_hot_videos_move(settings, aclient, redis_client)
    logins = [(f"member{i}", f"tab{i}") for i in range(24)]

    def by_viewer(viewer: str) -> int:
        return rules.viewer_route(rules.viewer_digest(viewer)) % plan.shards

    moving = [(u, s) for u, s in logins if by_viewer(u) != by_viewer(rules.ANON_VIEWER_PREFIX + s)]
    assert len(moving) > len(logins) // 2  # by the viewer, these would change shards
    traffic = Traffic(seed=49, now_ms=max(e.ingest_ts or 0 for e in events) + 1, step_ms=20)
    beats = [traffic.event("heartbeat", "viral", session_id=s) for _, s in logins]
    beats += [traffic.event("heartbeat", "viral", user_id=u, session_id=s) for u, s in logins]
    beats += [traffic.event("leave", "viral", user_id=u, session_id=s) for u, s in logins[:4]]
    worker = await _worker(hot, aclient, hot.topic_partitions)
    routed = _route(hot.events_topic, beats, plan, hot.topic_partitions, offsets)
    assert len({r.partition for r in routed}) > 1  # the sessions spread over the video's shards
    for partition in sorted({r.partition for r in routed}):
        await worker.handle([r for r in routed if r.partition == partition])

    await _watching_equals_the_oracle(aclient, "viral", events + beats)
    last = max(e.ingest_ts or 0 for e in beats)
    watching = oracle.watching_now(events + beats, last).get("viral", 0)
    assert watching >= len(logins) - 4  # the logged-in sessions that did not leave, each once


async def test_a_hot_videos_viewers_past_the_exact_limit_all_reach_its_sketch(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """A hot video's partitions share its exact viewer set; once the set holds EXACT_VIEWERS_LIMIT
    viewers it is folded into a HyperLogLog, and the viewers the other partitions send after that
    (their own exact counts are below the limit) go into the HyperLogLog too."""
    hot, events, plan, offsets = await _after_a_hot_videos_move(settings, aclient, redis_client)
    traffic = Traffic(seed=48, now_ms=max(e.ingest_ts or 0 for e in events) + 1, step_ms=0)
    crowd = [traffic.view("viral", f"crowd{i}") for i in range(EXACT_VIEWERS_LIMIT + 2_500)]
    queues: dict[int, list[Record]] = {}
    for record in _route(hot.events_topic, crowd, plan, hot.topic_partitions, offsets):
        queues.setdefault(record.partition, []).append(record)
    assert len(queues) > 1
    worker = await _worker(hot, aclient, hot.topic_partitions)
    while any(queues.values()):  # the partitions take turns: each sends viewers after the fold
        for partition, queue in queues.items():
            await worker.handle(queue[:200])
            queues[partition] = queue[200:]

    assert redis_client.type(keys.viewers("viral")) == b"string"
    assert keys.viewers("viral") in sink.FOLDED  # its next viewers go by script, in one round trip
    assert all(
        owned.state.viewers_of.get("viral", 0) < EXACT_VIEWERS_LIMIT for owned in worker.owned.values()
    )
    exact = oracle.count(events + crowd)["viral"].unique_viewers
    served = await read_speed(aclient, "viral", 0, 0)
    assert served.viewers_estimate is not None
    assert abs(served.viewers_estimate - exact) <= 0.02 * exact, (served.viewers_estimate, exact)


async def test_a_claim_publishes_again_the_plans_of_the_videos_its_partitions_are_home_to(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The ingest API routes a hot video by the plan in `keys.shard_plans()`: a counter claiming the
    video's home partition publishes it again, closed (the hand-off done) or not, so a hash lost or
    never written (a deployment whose plans were kept elsewhere before) routes the video as its
    counter expects once a counter starts."""
    hot, _, plan, _ = await _after_a_hot_videos_move(settings, aclient, redis_client)
    redis_client.delete(keys.shard_plans())

    await _worker(hot, aclient, hot.topic_partitions)

    assert decode_shard_plan(redis_client.hget(keys.shard_plans(), "viral") or b"") == plan


async def test_a_rebuild_reads_a_hot_videos_plan_from_the_log(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, broker: str
) -> None:
    """After Redis lost everything, `tally speed rebuild` replays the archived log: the moving
    viewers' state is handed over in memory, the plan is published again as the log shows it, and
    the counts equal the oracle's."""
    hot = settings.model_copy(
        update={
            "topic_partitions": 4,
            "hot_video_events_per_sec": 20,
            "max_video_shards": 8,
            "kafka_bootstrap": broker,  # the rebuild reads it past the archive: the topic is not there
        }
    )
    events, records = await _move_a_hot_video(hot, aclient, redis_client)
    ParquetLog(hot.raw_dir, hot.events_topic).write(records)
    plan = decode_shard_plan(redis_client.hget(keys.shard_plans(), "viral") or b"")
    redis_client.flushdb()

    await rebuild(hot, aclient)

    _at_every_edge(redis_client, hot, events)
    await _watching_equals_the_oracle(aclient, "viral", events)
    rebuilt = decode_shard_plan(redis_client.hget(keys.shard_plans(), "viral") or b"")
    moved_first = min(_first_ingest(r) for r in records if r.partition != home_of("viral", 4))
    assert rebuilt.shards == plan.shards and plan.active_from <= rebuilt.active_from <= moved_first


async def test_records_that_come_before_the_assignment_callback_are_counted(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """Faust may hand a batch over before the callback of its assignment ran: the worker claims
    those partitions itself, and the callback's claim then keeps what it counted."""
    events = Traffic(seed=48).mixed(n=300)
    records = pack(events, PARTITIONS)
    worker = StateCounter(settings, aclient, no_dead_letters)
    half = len(records) // 2
    await worker.handle(records[:half])  # no claim yet
    await worker.claim(settings.events_topic, list(range(PARTITIONS)))  # the callback, late
    report = await worker.handle(records[half:])
    assert not report.fenced
    assert {v: speed_counts(redis_client, v) for v in oracle.count(events)} == oracle.count(events)


async def test_a_batch_and_the_assignment_callback_claiming_at_once_fence_nothing(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The callback of an assignment can run while the worker claims the same partitions for a batch
    that came first (seen with a real broker): the two claims take turns, and the batch commits."""
    events = Traffic(seed=49).mixed(n=200)
    records = pack(events, PARTITIONS)
    worker = StateCounter(settings, aclient, no_dead_letters)
    report, _ = await asyncio.gather(
        worker.handle(records), worker.claim(settings.events_topic, list(range(PARTITIONS)))
    )
    assert not report.fenced
    assert {p: o.generation for p, o in worker.owned.items()} == dict.fromkeys(range(PARTITIONS), 1)
    assert {v: speed_counts(redis_client, v) for v in oracle.count(events)} == oracle.count(events)


async def test_a_claims_sunk_mark_is_what_it_restored_while_the_stream_applies_newer_records(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim sinks the restored state's last entry again, then marks the partition sunk (what
    readers that wait for the counter look at). The stream may apply newer records to the claimed
    state while the claim awaits Redis: the mark stays at the restored offset until those records
    are committed and sunk, and the counts still equal the oracle."""
    events = Traffic(seed=50).mixed(n=300)
    records = [r for r in pack(events, PARTITIONS) if r.partition == 0]
    half = len(records) // 2
    await _count(settings, aclient, records[:half])  # an earlier owner commits and sinks half
    restored = records[half - 1].offset
    sunk_key = keys.counter_offset(settings.events_topic, 0)
    later = StateCounter(settings, aclient, no_dead_letters)
    real_sink = state_counter.sink
    planned: list[PlannedBatch] = []

    async def stream_applies_newer_records(client: aioredis.Redis, plan: sink.SinkPlan) -> None:
        if not planned:  # the claim's sink of the restored last entry: the stream goes on meanwhile
            planned.append(later.plan(records[half:]))
        await real_sink(client, plan)

    monkeypatch.setattr(state_counter, "sink", stream_applies_newer_records)
    await later.claim(settings.events_topic, [0])

    assert planned and later.owned[0].state.offset == records[-1].offset  # newer records applied
    assert int(redis_client.get(sunk_key) or -1) == restored  # but only the restored ones are sunk
    report = await later.write(planned[0])
    assert not report.fenced
    assert int(redis_client.get(sunk_key) or -1) == records[-1].offset
    counted = [e for e in events if partition_for(record_key(e.video_id), PARTITIONS) == 0]
    assert {v: speed_counts(redis_client, v) for v in oracle.count(counted)} == oracle.count(counted)


async def test_a_partition_back_after_another_worker_counted_there_is_counted_on_its_state(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """A partition moves to a second worker and back (seen with a real broker under load): the first
    worker forgets it when an assignment leaves it out, so the records it gets when the partition
    comes back, before or while the callback claims it, count on the state the second worker
    committed, and none is fenced."""
    events = Traffic(seed=52).mixed(n=300)
    records = [r for r in pack(events, PARTITIONS) if r.partition == 0]
    third = len(records) // 3
    topic = settings.events_topic
    first = StateCounter(settings, aclient, no_dead_letters)
    second = StateCounter(settings, aclient, no_dead_letters)
    await first.assigned(topic, [0])
    await first.handle(records[:third])
    await first.assigned(topic, [])  # the rebalance that moves the partition
    await second.assigned(topic, [0])
    await second.handle(records[third : 2 * third])
    await second.assigned(topic, [])  # it leaves

    report, _ = await asyncio.gather(first.handle(records[2 * third :]), first.assigned(topic, [0]))

    assert not report.fenced
    assert first.owned[0].generation == 3 and first.owned[0].state.offset == records[-1].offset
    counted = [e for e in events if partition_for(record_key(e.video_id), PARTITIONS) == 0]
    assert {v: speed_counts(redis_client, v) for v in oracle.count(counted)} == oracle.count(counted)


async def test_records_past_the_states_next_offset_are_reported_as_not_counted(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis lost the state but the consumer resumes after its committed offsets: the counter says
    which records it did not count and what to do, instead of serving short counts in silence."""
    records = pack(Traffic(seed=52).mixed(n=200), PARTITIONS)
    first = [r for r in records if r.partition == 0]
    worker = await _count(settings, aclient, [r for r in records if r.partition != 0])
    with caplog.at_level(logging.WARNING, logger="tally.speed_layer"):
        await worker.handle(first[:2])
        assert not [r for r in caplog.records if "counter_gap" in r.getMessage()]
        await worker.handle(first[5:])
    gaps = [r.getMessage() for r in caplog.records if "counter_gap" in r.getMessage()]
    assert len(gaps) == 1
    assert "partition=0 state_offset=1 first_offset=5 not_counted=3" in gaps[0]
    assert "tally speed rebuild --replace" in gaps[0]
    # What it says to do: a plain rebuild would skip what the state covers, so it refuses.
    with pytest.raises(RebuildRefused, match=r"partitions \[0, 1, 2\].*tally speed rebuild --replace"):
        await rebuild(settings, aclient)


async def test_a_rebuild_over_counts_whose_state_was_lost_is_refused(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The counter's partition states are gone but its counts are not: a replay would add to them."""
    await _count(settings, aclient, pack(Traffic(seed=53).mixed(n=100), PARTITIONS))
    redis_client.delete(
        *[keys.partition_state(settings.events_topic, p, "offset") for p in range(PARTITIONS)]
    )
    with pytest.raises(
        RebuildRefused, match=r"no partition of the counter committed.*speed rebuild --replace"
    ):
        await rebuild(settings, aclient)
