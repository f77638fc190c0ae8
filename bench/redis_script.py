"""Where the counter's Redis time goes: the write script's CPU per event, section by section.

`python -m bench.redis_script [--events N]` plans N events of `bench.speed_traffic`'s traffic the
counter's way (micro-batches of 100 records, one plan per partition), then applies the same plans
to a fresh redis-server of its own, once per variant of `speed_layer/write.lua`, and reads
Redis's own CPU time (`INFO cpu`) around each pass:

- `unpack`: the plan decoded (`cmsgpack.unpack`) and nothing else;
- `main_loop`: the script up to the end of its loop over the ops (event markers, view windows,
  reactions, presence), without what follows it;
- `no_uniques`: the whole script but the unique-viewer section (viewer hashes and sketches);
- `no_marker_setnx`: the whole script with the event markers' HSETNX taken as new;
- `full`: the script as the counter runs it.

The differences say what each part costs an event. Only the full pass writes what the counter
writes; the cut variants are measurements, not counters. Prints one line of JSON and writes it
to bench/results/redis_script.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bench.report import report
from bench.speed_floor import redis_cpu_seconds
from bench.speed_traffic import generate, pack
from counting import keys
from counting.settings import Settings
from speed_layer import script
from speed_layer.counter import plan_batch
from speed_layer.plan import PartitionPlan
from speed_layer.records import Record
from speed_layer.windows import ViewWindows
from tally.services import free_port, start_redis

RESULTS = Path(__file__).resolve().parent / "results" / "redis_script.json"
RECORDS_PER_BATCH = 100
PARTITIONS = 4
TOPIC = "bench-script"


def plans_of(events: int, now_ms: int) -> list[PartitionPlan]:
    """The partition plans of `events` bench events, planned in micro-batches as the counter does."""
    stamped = generate(events, 2_000, max(1, events // 5), 1, now_ms - 3_600_000, 50_000.0)
    records = [
        Record(TOPIC, partition, offset, value, key)
        for offset, (partition, key, value) in enumerate(pack(stamped, PARTITIONS, {}))
    ]
    settings = Settings(bucket_ms=60_000)
    windows = ViewWindows()
    plans: list[PartitionPlan] = []
    for start in range(0, len(records), RECORDS_PER_BATCH):
        batch = records[start : start + RECORDS_PER_BATCH]
        plans.extend(plan_batch(batch, settings, windows, now_ms).writes)
    return plans


def variants(lua: str) -> dict[str, str]:
    """The script and its cut versions (see the module's docstring), by name."""
    lines = lua.split("\n")

    def at(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    uniques, increments = at("local order = {}"), at("local trending = {}")
    main_end = at("local written_markers")
    setnx = "if call('HSETNX', markers[m][1], event_id, ops[i + 5]) == 1 then"
    if setnx not in lua:
        raise SystemExit("write.lua changed: update bench/redis_script.py's marker variant")
    return {
        "unpack": "local plan = cmsgpack.unpack(ARGV[1]) return 1",
        "main_loop": "\n".join([*lines[:main_end], "return 1"]),
        "no_uniques": "\n".join(
            [*lines[:uniques], "local written_sketches, written_buckets = {}, {}", *lines[increments:]]
        ),
        "no_marker_setnx": lua.replace(setnx, "if true then"),
        "full": lua,
    }


def measure(client: redis.Redis, plans: list[tuple[list[str], bytes]], lua: str, events: int) -> float:
    """Redis CPU microseconds an event to apply every (keys, plan argument) with `lua`, from an
    empty database."""
    client.flushdb()
    runner = client.register_script(lua)
    started = redis_cpu_seconds(client)
    for keys_, arg in plans:
        runner(keys=keys_, args=[arg])
    return (redis_cpu_seconds(client) - started) / events * 1e6


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_script", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    now_ms = int(time.time() * 1000)
    print(f"planning {args.events:,} events ...", file=sys.stderr, flush=True)
    plans = plans_of(args.events, now_ms)
    encoded = [(plan.keys, plan.script_arg()) for plan in plans]  # once, for every variant
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tally-bench-script-") as tmp:
        server = start_redis(free_port(), Path(tmp))
        client = redis.Redis(port=server.port)
        try:
            for name, lua in variants(script.LUA).items():
                figures[name] = round(measure(client, encoded, lua, args.events), 2)
                print(f"  {name:16s} {figures[name]:6.2f} µs of Redis CPU an event", file=sys.stderr)
            # What the full pass (the last) stored: each partition's last offset.
            stored = {p: int(client.get(keys.partition_offset(TOPIC, p)) or -1) for p in range(PARTITIONS)}
        finally:
            client.close()
            server.stop()
    result = {
        "benchmark": "redis_script",
        "events": args.events,
        "plans": len(plans),
        "plan_bytes_per_event": round(sum(len(arg) for _, arg in encoded) / args.events, 1),
        "redis_cpu_us_per_event": figures,
        "offsets_stored": stored,
    }
    return report(result, args.output)


if __name__ == "__main__":
    main()
