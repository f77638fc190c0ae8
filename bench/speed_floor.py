"""The floor of any exactly-once counter in this design: the work it cannot leave out, measured.

The design asks the counter to store each event's dedup marker in Redis, in the same atomic write
as the partition's offset (docs/design.md, "Speed layer"). `exactly_once_floor` reads
the records with the plain consumer's settings, decodes their events, and for each partition of
each poll runs one Lua write that skips a replayed batch, writes the batch's markers and stores the
offset; nothing else: no bot scoring, windows, viewers, sketches, trending or presence. It is a
measurement, not a counter. Its markers go one of two ways:

- `redis`, the design's: one `HSETNX` an event (event id -> ingest time) inside the write. Every
  Tally counter does at least this much, so its rate bounds what the counter reaches here.
- `memory`, an alternative for the owner to weigh, not the design: the worker checks event ids
  against the ids its partition has already written, kept in its memory, and appends the batch's
  new markers to the partition's log as one blob (`RPUSH`: the batch's latest ingest time, for
  expiry, then an id a line) in the same write. The ids join the worker's set only once the write
  returned, so an unwritten batch hides nothing. A worker taking over a partition would load that
  log first; a run from an empty Redis has nothing to load, so the floor leaves that out. It only
  holds if every copy of an event reaches the same partition: true of a hot video's shards, derived
  from the viewer, except across a change of the video's shard count (the state counter's hand-off,
  docs/decisions/0005-speed-layer-state.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis
from confluent_kafka import Consumer, Message, TopicPartition

from counting.event import Event
from counting.wire import decode_events

MARKERS_IN_REDIS = """
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) <= stored then return 0 end
local call, markers, new = redis.call, KEYS[2], 0
for i = 2, #ARGV, 2 do
  new = new + call('HSETNX', markers, ARGV[i], ARGV[i + 1])
end
call('SET', KEYS[1], ARGV[1])
return new
"""
MARKER_LOG = """
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) <= stored then return 0 end
if ARGV[2] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[2]) end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
MARKER_PLACES = ("redis", "memory")
POLL_RECORDS = 100  # records a poll: the counter's micro-batches hold about as many
IDLE_LIMIT_S = 30.0  # a reader that gets no record for this long stops with an error, not a hang


def consumer_config(group: str) -> dict[str, Any]:
    """The plain consumer's settings, shared by the floor so both read the broker alike.

    librdkafka stops fetching when its local queue holds 64 MB (`queued.max.messages.kbytes`'s
    default) and then waits out `fetch.queue.backoff.ms` (1 s) before the next fetch. A million
    bench events are about 210 MB, so a reader that outpaces the broker stalls there for most of a
    second, at random: the plain consumer read 0.7 or 2.0 M events/s by that alone. The queue is
    raised to 1 GB so the reading rate is the consumer's, not the backoff's."""
    return {
        "bootstrap.servers": "",
        "group.id": group,
        "enable.auto.commit": False,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.max.messages.kbytes": 1024 * 1024,
    }


def polls(consumer: Consumer, records: int, topic: str) -> Iterator[list[Message]]:
    """The consumer's polls of up to `records` records, for as long as the caller reads; raises
    once `topic` has given nothing for `IDLE_LIMIT_S` seconds (a reader expecting more events than
    the topic holds would otherwise wait for ever)."""
    heard = time.monotonic()
    while True:
        messages = consumer.consume(records, timeout=1.0)
        if messages:
            heard = time.monotonic()
            yield messages
        elif time.monotonic() - heard > IDLE_LIMIT_S:
            raise RuntimeError(
                f"no record from topic {topic!r} for {IDLE_LIMIT_S:.0f} s before every expected event"
                " was read; check that the broker is up and that the topic was filled with the events"
            )


def marker_keys(topic: str, partition: int, place: str = "redis") -> list[str]:
    """The floor's offset key and markers (a hash, or for `memory` a list of blobs) of one
    partition: its own names, beside the counter's."""
    prefix = f"bench-floor-{place}:{topic}:{partition}"
    return [f"{prefix}:offset", f"{prefix}:markers"]


class _MarkersInRedis:
    """The design's markers: one `HSETNX` an event inside the write."""

    script = MARKERS_IN_REDIS

    def __init__(self) -> None:
        self.pending: dict[int, list[Any]] = {}

    def add(self, partition: int, offset: int, events: list[Event]) -> None:
        args = self.pending.get(partition)
        if args is None:
            args = self.pending[partition] = [offset]
        args[0] = offset
        for event in events:
            args.append(event.event_id)
            args.append(event.ingest_ts)

    def writes(self) -> Iterator[tuple[int, list[Any]]]:
        pending, self.pending = self.pending, {}
        yield from pending.items()

    def written(self, partition: int, reply: int) -> int:
        return int(reply)


class _MarkersInMemory:
    """Ids checked in the worker's memory, the batch's new ones logged as one blob: its latest
    ingest time (for expiry), then an id a line."""

    script = MARKER_LOG

    def __init__(self, partitions: int) -> None:
        self.seen: dict[int, set[str]] = {p: set() for p in range(partitions)}
        self.pending: dict[int, list[Any]] = {}
        self.new: dict[int, set[str]] = {}

    def add(self, partition: int, offset: int, events: list[Event]) -> None:
        batch = self.pending.get(partition)
        if batch is None:
            batch = self.pending[partition] = [offset, set(), 0]
        batch[0] = offset
        batch[1].update([event.event_id for event in events])
        batch[2] = max(batch[2], max((event.ingest_ts for event in events), default=0))

    def writes(self) -> Iterator[tuple[int, list[Any]]]:
        pending, self.pending = self.pending, {}
        for partition, (offset, ids, latest) in pending.items():
            new = self.new[partition] = ids - self.seen[partition]
            yield partition, [offset, f"{latest}\n" + "\n".join(new) if new else ""]

    def written(self, partition: int, reply: int) -> int:
        new = self.new.pop(partition)
        if not reply:  # a replayed batch: its markers were written with it the first time
            return 0
        self.seen[partition] |= new
        return len(new)


def exactly_once_floor(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected_events: int,
    redis_url: str,
    markers_in: str = "redis",
) -> dict[str, Any]:
    """Read `expected_events` events from the start of `topic`, writing markers (`markers_in`, one
    of `MARKER_PLACES`) and offsets as above; report the rate, this process's and Redis's CPU an
    event and the markers written."""
    if markers_in not in MARKER_PLACES:
        raise ValueError(f"markers_in={markers_in!r}: the floor keeps markers in one of {MARKER_PLACES}")
    place = _MarkersInRedis() if markers_in == "redis" else _MarkersInMemory(partitions)
    client = redis.Redis.from_url(redis_url)
    write = client.register_script(place.script)
    consumer = Consumer({**consumer_config(f"bench-floor-{time.time_ns()}"), "bootstrap.servers": bootstrap})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    events = markers = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    redis_started = redis_cpu_seconds(client)
    try:
        for messages in polls(consumer, POLL_RECORDS, topic):
            for message in messages:
                partition = message.partition()
                if message.error() is not None or partition is None:
                    continue
                decoded = decode_events(message.value() or b"")
                place.add(partition, message.offset(), decoded)
                events += len(decoded)
            for partition, args in place.writes():
                reply = write(keys=marker_keys(topic, partition, markers_in), args=args)
                markers += place.written(partition, reply)
            if events >= expected_events:
                break
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        redis_cpu = redis_cpu_seconds(client) - redis_started
    finally:
        consumer.close()
        client.close()
    return {
        "events": events,
        "markers": markers,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "cpu_us_per_event": round(cpu / events * 1e6, 2),
        "redis_cpu_us_per_event": round(redis_cpu / events * 1e6, 2),
    }


def redis_cpu_seconds(client: redis.Redis) -> float:
    """User + system CPU time the Redis server has used so far (`INFO cpu`)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
