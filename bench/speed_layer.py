"""Benchmark the speed layer's counter against a plain consumer of the same records.

`python -m bench.speed_layer [--events N] [--partitions P]` starts a fresh Tansu broker and a
redis-server of its own, fills a topic with generated events (`bench.speed_traffic`) packed the
way the ingest API packs them (one request of 500 events stamped with one ingest time, one record
per partition, hot videos keyed `video_id#k`), then measures in the same run:

(a) a plain confluent-kafka consumer that reads the records and decodes their events, nothing else;
(b) the Tally counter (`python -m speed_layer counter`, one worker process) from the same topic into
    its partition state and Redis's read keys, with dedup, bot scoring, sketches, trending and the
    exactly-once commits on;
and, between them, the exactly-once floor (`bench.speed_floor`): decode, one dedup marker an event
and the offset in one Lua write, nothing else, which bounds what any counter of this design reaches
(and the same floor with the markers checked in the worker's memory, an alternative to the design);

first with traffic spread over many videos, then with all traffic on one video. Prints one line of
JSON and writes bench/results/speed_layer.json; at its top, beside the ratios, the counter's
`worker_bytes_per_event` (the resident memory its process added an event timed, uniform traffic)
and `restore_s` (the longest restore of a partition after the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import redis
import redis.asyncio as aioredis
from confluent_kafka import Consumer, TopicPartition

from bench.machine import cpu_seconds, machine, resident_bytes
from bench.speed_floor import MARKER_PLACES, consumer_config, exactly_once_floor, polls, redis_cpu_seconds
from bench.speed_traffic import fill, generate, pack
from counting import keys
from counting.event import Event
from counting.settings import Settings
from counting.wire import decode_events
from speed_layer.state.partition import PartitionState
from speed_layer.state.partition_store import PartitionStore
from tally.services import free_port, free_ports, start_broker, start_redis, stop_process
from tally.stack import settings_env
from tally.topics import ensure_topics

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
PLAIN_RUNS = 3  # (a) reads a million events in about half a second: its median of three is the figure
# How often (b) reads the counter's offsets from Redis: each read is Redis work the counter's figure
# includes (every 5 ms it was some 0.15 µs an event of it); 20 ms is under 0.1 % of a run's time.
POLL_S = 0.02


def plain_consumer(bootstrap: str, topic: str, partitions: int, expected_events: int) -> dict[str, float]:
    """(a): read every record of the topic and decode its events; nothing else."""
    consumer = Consumer({**consumer_config(f"bench-plain-{time.time_ns()}"), "bootstrap.servers": bootstrap})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    events = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    try:
        for messages in polls(consumer, 1_000, topic):
            for message in messages:
                if message.error() is None:
                    events += len(decode_events(message.value() or b""))
            if events >= expected_events:
                break
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    finally:
        consumer.close()
    return {
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "cpu_us_per_event": round(cpu / events * 1e6, 2),
    }


def counter_run(settings: Settings, records: list[tuple[int, bytes, bytes]], events: int) -> dict[str, Any]:
    """(b): one counter worker process from the start of the topic until Redis holds every offset;
    timed from its first stored batch (the broker's group join before it is not counting).

    Besides wall time it reports the CPU time the counter process and Redis spent per event over
    the same span: on a shared 2-core machine that figure moves less than the wall-clock rate."""
    client = redis.Redis.from_url(settings.redis_url)
    group = f"bench-{settings.events_topic}"
    ends: dict[int, int] = {}
    for partition, _, _ in records:
        ends[partition] = ends.get(partition, 0) + 1
    log = settings.data_dir / "counter.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            # A consumer group of its own: the run reads the topic from its start.
            [sys.executable, "-m", "speed_layer", "counter", "--loglevel", "WARNING", "--group", group],
            cwd=ROOT,
            env=settings_env(settings),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        names = [keys.counter_offset(settings.events_topic, p) for p in sorted(ends)]
        client.config_resetstat()  # the commands' figures below are this run's
        memory_before = int(client.info("memory")["used_memory"])
        first: float | None = None
        first_done = 0
        cpu_start = (0.0, 0.0)
        resident_start = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            values = client.mget(names)
            stored = {
                p: int(v) + 1 if v is not None else 0 for p, v in zip(sorted(ends), values, strict=True)
            }
            if first is None and any(stored.values()):
                first = time.perf_counter()
                first_done = sum(stored.values())
                cpu_start = (cpu_seconds(process.pid), redis_cpu_seconds(client))
                resident_start = resident_bytes(process.pid)
            if all(stored[p] >= ends[p] for p in ends):
                break
            if process.poll() is not None:
                raise RuntimeError(f"the counter exited ({process.returncode}); see {log}")
            time.sleep(POLL_S)
        else:
            raise RuntimeError(f"the counter did not finish within 600 s; see {log}")
        seconds = time.perf_counter() - (first or time.perf_counter())
        counter_cpu = cpu_seconds(process.pid) - cpu_start[0]
        resident = resident_bytes(process.pid) - resident_start
        redis_cpu = redis_cpu_seconds(client) - cpu_start[1]
        memory = int(client.info("memory")["used_memory"]) - memory_before
        commands = client.info("commandstats")
        by_kind = memory_by_kind(client)
    finally:
        stop_process(process, 30)
        client.close()
    if first_done >= len(records):
        raise RuntimeError(
            f"the counter stored all {len(records)} records in its first write, so nothing is left to"
            " time; run with more events (--events 200000 or more)"
        )
    share = 1 - first_done / len(records)
    counted = events * share
    return {
        **restore_seconds(settings, sorted(ends)),
        "events": events,
        "timed_events": round(counted),
        "seconds": round(seconds, 3),
        "events_per_s": round(counted / seconds),
        "counter_cpu_us_per_event": round(counter_cpu / counted * 1e6, 2),
        "redis_cpu_us_per_event": round(redis_cpu / counted * 1e6, 2),
        "redis_bytes_per_event": round(memory / events, 1),
        # The counter process's resident memory the timed events added (its state, for the
        # counter; the markers' slabs grow by doubling, so this moves in steps).
        "worker_bytes_per_event": round(resident / counted, 1),
        # Where Redis spends them: each command's CPU (a script's commands also count inside the
        # script's own figure) and each kind of key's memory, an event.
        "redis_cpu_us_per_event_by_command": {
            name.removeprefix("cmdstat_"): round(int(stat["usec"]) / counted, 3)
            for name, stat in sorted(commands.items(), key=lambda kv: -int(kv[1]["usec"]))
            if int(stat["usec"]) / counted >= 0.01
        },
        "redis_bytes_per_event_by_key": {
            kind: round(size / events, 1) for kind, size in by_kind.items() if size / events >= 0.01
        },
    }


def memory_by_kind(client: redis.Redis) -> dict[str, int]:
    """Redis memory by kind of key, largest first: a key's hash tag and numbers made generic
    (`tally:{v0001}:hll:29000000` is `tally:{}:hll:N`)."""
    sizes: dict[str, int] = {}
    for key in client.scan_iter(count=5_000):
        kind = re.sub(r"\d+", "N", re.sub(r"\{[^}]*\}", "{}", key.decode(errors="replace")))
        sizes[kind] = sizes.get(kind, 0) + int(client.memory_usage(key, samples=0) or 0)
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def restore_seconds(settings: Settings, partitions: list[int]) -> dict[str, float]:
    """How long a new owner of the counter takes to restore each partition's state from
    its snapshot and changelog in Redis (read and decode, as `StateCounter.claim` does)."""
    client = aioredis.Redis.from_url(settings.redis_url)
    store = PartitionStore(client, settings.events_topic)
    times = []

    async def restore_all() -> None:
        for partition in partitions:
            state = PartitionState(settings.bucket_ms, settings.retention_ms, settings.retry_horizon_ms)
            started = time.perf_counter()
            await store.restore(partition, state)
            times.append(time.perf_counter() - started)
        await client.aclose()

    asyncio.run(restore_all())
    return {"restore_max_partition_s": round(max(times), 3), "restore_all_s": round(sum(times), 3)}


def _empty_redis(url: str) -> None:
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


def _with_broker_cpu(broker_pid: int, events: int, read: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """`read()`'s figures, and the broker's CPU an event while it read."""
    started = cpu_seconds(broker_pid)
    figures = read()
    broker_cpu = cpu_seconds(broker_pid) - started
    return {**figures, "broker_cpu_us_per_event": round(broker_cpu / events * 1e6, 2)}


def _scenario(
    name: str, base: Settings, broker_pid: int, events: list[Event], shards: dict[str, int]
) -> dict[str, Any]:
    bootstrap = base.kafka_bootstrap
    topic = f"bench-{name}-{time.time_ns()}"
    settings = base.model_copy(update={"events_topic": topic, "dead_letter_topic": f"{topic}-dlq"})
    ensure_topics(settings)
    records = pack(events, settings.topic_partitions, shards)
    _empty_redis(settings.redis_url)
    print(f"[{name}] {len(events)} events in {len(records)} records: filling the topic", file=sys.stderr)
    fill(bootstrap, topic, records)
    partitions, count = settings.topic_partitions, len(events)
    plain_run = partial(plain_consumer, bootstrap, topic, partitions, count)
    runs = []
    for run in range(PLAIN_RUNS):
        print(f"[{name}] plain consumer, run {run + 1} of {PLAIN_RUNS}", file=sys.stderr)
        runs.append(_with_broker_cpu(broker_pid, count, plain_run))
    plain = {
        **sorted(runs, key=lambda r: r["events_per_s"])[len(runs) // 2],
        "runs_events_per_s": [r["events_per_s"] for r in runs],
    }
    floors = {}
    for place in MARKER_PLACES:
        print(f"[{name}] exactly-once floor, markers in {place}", file=sys.stderr)
        floors[place] = _with_broker_cpu(
            broker_pid,
            count,
            partial(exactly_once_floor, bootstrap, topic, partitions, count, settings.redis_url, place),
        )
    _empty_redis(settings.redis_url)  # the counter starts from an empty Redis, as the floors did
    # The traffic starts sharded: as if each hot video's home had handed its viewers over already
    # (nothing to move), so its shards count from the first record (speed_layer/counter/handoff.py).
    client = redis.Redis.from_url(settings.redis_url)
    for video in shards:
        client.set(keys.handoff_closed(video), "1")
    client.close()
    print(f"[{name}] counter", file=sys.stderr)
    counter = counter_run(settings, records, len(events))
    return {
        "records": len(records),
        "events_per_record": round(len(events) / len(records), 1),
        "plain_consumer": plain,
        "floor": floors["redis"],
        "floor_ratio": round(floors["redis"]["events_per_s"] / plain["events_per_s"], 3),
        "floor_markers_in_memory": floors["memory"],
        "floor_markers_in_memory_ratio": round(floors["memory"]["events_per_s"] / plain["events_per_s"], 3),
        "counter": counter,
        "ratio": round(counter["events_per_s"] / plain["events_per_s"], 3),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_layer", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--videos", type=int, default=2_000)
    args = parser.parse_args(argv)
    now = int(time.time() * 1000)
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as tmp:
        work = Path(tmp)
        broker = start_broker(free_port(), work / "logs")
        store = start_redis(free_port(), work / "logs")
        try:
            bootstrap = f"127.0.0.1:{broker.port}"
            base = Settings(
                data_dir=work / "data",
                kafka_bootstrap=bootstrap,
                redis_url=f"redis://127.0.0.1:{store.port}/0",
                topic_partitions=args.partitions,
                faust_web_port=free_ports(2),
                bucket_ms=60_000,
            )
            start_ms = now - base.retry_horizon_ms // 2  # no event crosses the horizon during a run
            uniform = generate(args.events, args.videos, args.events // 5, 1, start_ms, 50_000.0)
            one = [
                msgspec.structs.replace(e, video_id="viral")
                for e in generate(args.events, 1, args.events // 5, 2, start_ms, 50_000.0)
            ]
            shards = {"viral": base.max_video_shards}
            figures = {
                "uniform": _scenario("uniform", base, broker.process.pid, uniform, {}),
                "one_video": _scenario("one-video", base, broker.process.pid, one, shards),
            }
        finally:
            store.stop()
            broker.stop()
    u, o = figures["uniform"]["counter"]["events_per_s"], figures["one_video"]["counter"]["events_per_s"]
    result = {
        "benchmark": "speed_layer",
        "events": args.events,
        "partitions": args.partitions,
        "videos": args.videos,
        "uniform_counter_events_per_s": u,
        "uniform_plain_events_per_s": figures["uniform"]["plain_consumer"]["events_per_s"],
        "uniform_ratio": figures["uniform"]["ratio"],
        "uniform_counter_cpu_us_per_event": figures["uniform"]["counter"]["counter_cpu_us_per_event"],
        "uniform_redis_cpu_us_per_event": figures["uniform"]["counter"]["redis_cpu_us_per_event"],
        "uniform_plain_cpu_us_per_event": figures["uniform"]["plain_consumer"]["cpu_us_per_event"],
        "uniform_floor_events_per_s": figures["uniform"]["floor"]["events_per_s"],
        "uniform_floor_ratio": figures["uniform"]["floor_ratio"],
        "uniform_floor_redis_cpu_us_per_event": figures["uniform"]["floor"]["redis_cpu_us_per_event"],
        "uniform_floor_markers_in_memory_ratio": figures["uniform"]["floor_markers_in_memory_ratio"],
        "uniform_redis_bytes_per_event": figures["uniform"]["counter"]["redis_bytes_per_event"],
        "worker_bytes_per_event": figures["uniform"]["counter"]["worker_bytes_per_event"],
        "restore_s": figures["uniform"]["counter"]["restore_max_partition_s"],
        "one_video_redis_cpu_us_per_event": figures["one_video"]["counter"]["redis_cpu_us_per_event"],
        "one_video_counter_events_per_s": o,
        "one_video_plain_events_per_s": figures["one_video"]["plain_consumer"]["events_per_s"],
        "one_video_ratio": figures["one_video"]["ratio"],
        "one_video_vs_uniform": round(o / u, 3),
        "scenarios": figures,
        "machine": machine(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "speed_layer.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
