"""The floor of any exactly-once counter in this design: the work it cannot leave out, measured.

The design asks the counter to store each event's dedup marker in Redis, in the same atomic write
as the partition's offset (docs: ../shared/DESIGN.md, "Speed layer"). `exactly_once_floor` reads
the records with the plain consumer's settings, decodes their events, and for each partition of
each poll runs one Lua write that skips a replayed batch, sets one marker per event (`HSETNX`
event id -> ingest time) and stores the offset; nothing else: no bot scoring, windows, viewers,
sketches, trending or presence. Every Tally counter does at least this much, so its rate bounds
what the counter can reach on the same machine. It is a measurement, not a counter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis
from confluent_kafka import Consumer, Message, TopicPartition

from counting.wire import decode_events

LUA = """
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) <= stored then return 0 end
local call, markers, new = redis.call, KEYS[2], 0
for i = 2, #ARGV, 2 do
  new = new + call('HSETNX', markers, ARGV[i], ARGV[i + 1])
end
call('SET', KEYS[1], ARGV[1])
return new
"""
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


def marker_keys(topic: str, partition: int) -> list[str]:
    """The floor's offset key and marker hash of one partition (its own names, beside the counter's)."""
    return [f"bench-floor:{topic}:{partition}:offset", f"bench-floor:{topic}:{partition}:markers"]


def exactly_once_floor(
    bootstrap: str, topic: str, partitions: int, expected_events: int, redis_url: str
) -> dict[str, Any]:
    """Read `expected_events` events from the start of `topic`, writing markers and offsets as
    above; report the rate, this process's and Redis's CPU an event and the markers set."""
    client = redis.Redis.from_url(redis_url)
    write = client.register_script(LUA)
    consumer = Consumer({**consumer_config(f"bench-floor-{time.time_ns()}"), "bootstrap.servers": bootstrap})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    events = markers = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    redis_started = redis_cpu_seconds(client)
    try:
        for messages in polls(consumer, POLL_RECORDS, topic):
            batches: dict[int, list[Any]] = {}
            for message in messages:
                partition = message.partition()
                if message.error() is not None or partition is None:
                    continue
                args = batches.setdefault(partition, [0])
                args[0] = message.offset()
                for event in decode_events(message.value() or b""):
                    args.append(event.event_id)
                    args.append(event.ingest_ts)
                    events += 1
            for partition, args in batches.items():
                markers += int(write(keys=marker_keys(topic, partition), args=args))
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
