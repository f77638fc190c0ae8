"""What Redis spends on the sink's per-event writes sent through a Lua script against the same
writes sent as plain commands (why `speed_layer/sink/sink.py` sends them as commands).

`python -m bench.script_or_commands [--elements N] [--rounds R]` starts a redis-server of its own,
then writes R videos' worth of N viewers (HSET digest -> first bucket) and N sessions (ZADD GT
heartbeat session) each, in alternating passes: `script` (the elements msgpack-packed in one
argument, unpacked by `cmsgpack` and written by `redis.call` in chunks of 4,000, as `sink.lua`
did) and `commands` (one HSET and one ZADD a video, pipelined). It reads Redis's own CPU time
(`INFO cpu`) around each pass and prints Redis CPU per element pair (one HSET field and one ZADD
member), the median of the passes; writes bench/results/script_or_commands.json (or `--output`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import redis

from bench.machine import machine
from bench.report import report
from bench.speed_floor import redis_cpu_seconds
from tally.services import free_port, start_redis

RESULTS = Path(__file__).parent / "results"
CHUNK = 4_000
LUA = f"""
local function variadic(command, key, items, before)
  for i = 1, #items, {CHUNK} do
    local last = math.min(i + {CHUNK} - 1, #items)
    if before then
      redis.call(command, key, before, unpack(items, i, last))
    else
      redis.call(command, key, unpack(items, i, last))
    end
  end
end
variadic('HSET', KEYS[1], cmsgpack.unpack(ARGV[1]))
variadic('ZADD', KEYS[2], cmsgpack.unpack(ARGV[2]), 'GT')
return 1
"""
PASSES = ("script", "commands") * 3


def video(n: int, elements: int) -> tuple[list[object], list[object]]:
    """A video's viewers (digest, first bucket, ...) and sessions (heartbeat, session, ...)."""
    firsts: list[object] = []
    present: list[object] = []
    for i in range(elements):
        firsts += [os.urandom(8).hex(), 29_000_000 + i % 3]
        present += [1_764_000_000_000 + i, f"s-u{n}-{i}"]
    return firsts, present


def write_pass(client: redis.Redis, how: str, videos: list[tuple[list[object], list[object]]]) -> float:
    """Write every video one way into an empty database; Redis's CPU seconds for it."""
    client.flushdb()
    script = client.register_script(LUA)
    started = redis_cpu_seconds(client)
    for n, (firsts, present) in enumerate(videos):
        if how == "script":
            script(
                keys=[f"v{n}", f"p{n}"],
                args=[msgspec.msgpack.encode(firsts), msgspec.msgpack.encode(present)],
            )
        else:
            pipe = client.pipeline(transaction=False)
            pipe.execute_command("HSET", f"v{n}", *firsts)
            pipe.execute_command("ZADD", f"p{n}", "GT", *present)
            pipe.execute()
    return redis_cpu_seconds(client) - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.script_or_commands", description=__doc__)
    parser.add_argument("--elements", type=int, default=5_000, help="viewers and sessions a video")
    parser.add_argument("--rounds", type=int, default=40, help="videos a pass")
    parser.add_argument("--output", type=Path, default=RESULTS / "script_or_commands.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as tmp:
        server = start_redis(free_port(), Path(tmp))
        client = redis.Redis(port=server.port)
        try:
            spent: dict[str, list[float]] = {"script": [], "commands": []}
            for how in PASSES:
                print(f"{how}: {args.rounds} videos of {args.elements} viewers and sessions", file=sys.stderr)
                videos = [video(n, args.elements) for n in range(args.rounds)]
                spent[how].append(write_pass(client, how, videos))
        finally:
            client.close()
            server.stop()
    pairs = args.rounds * args.elements
    per_pair = {how: [round(s / pairs * 1e6, 3) for s in runs] for how, runs in spent.items()}
    median = {how: statistics.median(runs) for how, runs in per_pair.items()}
    result = {
        "benchmark": "script_or_commands",
        "elements_per_video": args.elements,
        "videos_per_pass": args.rounds,
        "script_redis_us_per_pair": median["script"],
        "commands_redis_us_per_pair": median["commands"],
        "script_over_commands": round(median["script"] / median["commands"], 2),
        "runs_redis_us_per_pair": per_pair,
        "machine": machine(),
    }
    return report(result, args.output)


if __name__ == "__main__":
    main()
