"""Benchmark the CPU of the counter with its state in the worker, in process: the real
`StateCounter` plans (applies the rules to its partitions' state) and writes (commits and sinks to
a redis-server of its own) micro-batches of generated traffic packed as the ingest API packs it.

`python -m bench.counter_cpu [--events N] [--batch-records R] [--runs K]` runs each way of setting
the garbage collector `--runs` times, alternating, each in a process of its own (the collector's
state is the process's):

- `as_is`: CPython's defaults;
- `tuned`: as the counter app sets it (`speed_layer/heap.py`: a young pass every 20,000 new
  objects instead of 700).

Prints one line of JSON (per way, the median CPU an event of planning and of writing, the
longest plans of a batch, p50, p99 and max: the pauses of the worker's loop, a snapshot's encoding
among them; the collector's passes by generation and their time; in bytes an event, the resident
memory the counting added and what the shallow copies of the largest partition's tables, which a
snapshot's build starts with, hold beside the state) and writes bench/results/counter_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import machine, resident_bytes
from bench.report import report
from bench.speed_traffic import generate, pack
from counting import rules
from counting.redisconn import async_client
from counting.settings import Settings
from serving_layer.speed import platform_counts
from speed_layer import heap
from speed_layer.counter.state_counter import StateCounter
from speed_layer.records import Record
from speed_layer.state.partition import PartitionState
from tally.services import free_port, start_redis

RESULTS = Path(__file__).parent / "results"
WAYS = ("as_is", "tuned")
PARTITIONS = 4
VIDEOS = 2_000


class _Passes:
    """The collector's passes by generation and the time they took (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.process_time() - self._started


def records_of(events: int, seed: int, now_ms: int) -> list[Record]:
    """The bench's uniform traffic (`bench.speed_layer`) as the records of a 4-partition topic,
    ingested from half a retry horizon before `now_ms`: every run of a bench counts the same
    records, and none crosses the counter's horizon while it runs."""
    start_ms = now_ms - Settings().retry_horizon_ms // 2
    generated = generate(events, VIDEOS, events // 5, seed, start_ms, 50_000.0)
    offsets = [0] * PARTITIONS
    records = []
    for partition, key, value in pack(generated, PARTITIONS, {}):
        records.append(Record("bench", partition, offsets[partition], value, key))
        offsets[partition] += 1
    return records


async def one_run(way: str, redis_url: str, events: int, batch_records: int, now_ms: int) -> dict[str, Any]:
    """Count the traffic once with the collector set `way`; the CPU an event of each phase."""
    records = records_of(events, seed=1, now_ms=now_ms)
    settings = Settings(
        redis_url=redis_url,
        topic_partitions=PARTITIONS,
        bucket_ms=60_000,
        events_topic="bench",
    )
    client = async_client(settings)
    await client.flushdb()

    async def no_dead_letters(letter: Any) -> None:
        raise AssertionError(f"the bench's traffic has no bad record ({letter!r})")

    counter = StateCounter(settings, client, no_dead_letters)
    await counter.claim(settings.events_topic, list(range(PARTITIONS)))
    gc.collect()  # the traffic's generation is not the counter's garbage
    if way == "tuned":
        heap.tune()
    passes = _Passes()
    gc.callbacks.append(passes)
    planning = writing = 0.0
    per_batch: list[float] = []  # each batch's planning: the loop's pause (a snapshot's chunk, too)
    before = resident_bytes(os.getpid())
    for start in range(0, len(records), batch_records):
        began = time.process_time()
        batch = counter.plan(records[start : start + batch_records])
        planned = time.process_time()
        await counter.write(batch)
        planning += planned - began
        per_batch.append(planned - began)
        writing += time.process_time() - planned
    gc.callbacks.remove(passes)
    held = resident_bytes(os.getpid()) - before
    copies = max(_copies_bytes(owned.state) for owned in counter.owned.values())
    now_bucket = rules.bucket_of(now_ms, settings.bucket_ms)
    counted = await platform_counts(client, now_bucket - 200, now_bucket + 1)
    await client.aclose()
    return {
        "plan_us_per_event": round(planning / events * 1e6, 2),
        "write_us_per_event": round(writing / events * 1e6, 2),
        "gc_passes": passes.count,
        "gc_us_per_event": round(sum(passes.seconds) / events * 1e6, 2),
        "plan_ms_p50": round(_quantile(per_batch, 0.5) * 1000, 1),
        "plan_ms_p99": round(_quantile(per_batch, 0.99) * 1000, 1),
        "plan_ms_max": round(max(per_batch) * 1000, 1),
        "worker_bytes_per_event": round(held / events, 1),
        "build_copies_bytes_per_event": round(copies / events, 1),
        "counted": counted,
    }


def _copies_bytes(state: PartitionState) -> int:
    """What the shallow copies of a partition's tables, which a snapshot's build starts with, hold
    beside the state: the dicts themselves (their keys and values are the state's)."""
    return sum(sys.getsizeof(table) for table in state.table_copies().values())


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.counter_cpu", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch-records", type=int, default=100, help="records a micro-batch")
    parser.add_argument("--runs", type=int, default=3, help="runs of each way")
    parser.add_argument("--output", type=Path, default=RESULTS / "counter_cpu.json")
    parser.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # a run, in its own process
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--now-ms", type=int, help=argparse.SUPPRESS)  # the traffic's, every run's
    args = parser.parse_args(argv)
    if args.one:
        counted = one_run(args.one, args.redis_url, args.events, args.batch_records, args.now_ms)
        print(json.dumps(asyncio.run(counted)))
        return {}
    now_ms = int(time.time() * 1000)
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as tmp:
        server = start_redis(free_port(), Path(tmp))
        try:
            for n in range(args.runs):
                for way in WAYS:
                    print(f"run {n + 1}/{args.runs}: {way}, {args.events} events", file=sys.stderr)
                    command = [sys.executable, "-m", "bench.counter_cpu", "--one", way]
                    command += ["--redis-url", f"redis://127.0.0.1:{server.port}/0"]
                    command += ["--events", str(args.events), "--batch-records", str(args.batch_records)]
                    command += ["--now-ms", str(now_ms)]
                    done = subprocess.run(command, capture_output=True, text=True, check=True)
                    runs[way].append(json.loads(done.stdout.splitlines()[-1]))
        finally:
            server.stop()
    figures: dict[str, Any] = {}
    for way, results in runs.items():
        figures[way] = {
            name: statistics.median(r[name] for r in results)
            for name in (
                "plan_us_per_event",
                "write_us_per_event",
                "gc_us_per_event",
                "plan_ms_p50",
                "plan_ms_p99",
                "plan_ms_max",
                "worker_bytes_per_event",
                "build_copies_bytes_per_event",
            )
        }
        figures[way]["counter_us_per_event"] = round(
            figures[way]["plan_us_per_event"] + figures[way]["write_us_per_event"], 2
        )
    result = {
        "benchmark": "counter_cpu",
        "events": args.events,
        "batch_records": args.batch_records,
        "runs": args.runs,
        **{f"{way}_{name}": value for way, f in figures.items() for name, value in f.items()},
        "tuned_over_as_is": round(
            figures["tuned"]["counter_us_per_event"] / figures["as_is"]["counter_us_per_event"], 3
        ),
        "each_run": runs,
        "machine": machine(),
    }
    return report(result, args.output)


if __name__ == "__main__":
    main()
