"""Benchmark the stats route under concurrent clients (wrk, one serving worker process) while the
speed layer counts, against a plain Redis GET round trip measured in the same run.
`python -m bench.serving [--seconds N] [--connections 2 4 8 16] [--rate 2000]`.

Each closed-loop phase runs wrk with N connections as fast as the worker answers. The paced phase
offers a fixed rate (wrk's Lua `delay()` keeps a schedule of one request every 1/rate s over its
connections); wrk times from the send, so a stall's backlog is not counted (no coordinated-omission
correction: wrk2 is not available). Every phase also reports the CPU time of the serving worker, wrk
and Redis and how busy the machine was, since all share its cores: `serving_cpu_us_per_request` is
the figure that noise from other jobs moves least.

Then the rank and creator routes, closed loop (`--other-connections`), reported at the top level
as `rank_rps`, `rank_p99_ms`, `creator_rps` and `creator_p99_ms` with whether each meets its target
(rank: 2,000 requests/s at p99 <= 10 ms; creator: at p99 <= 20 ms).

Prints progress, then one line of JSON; writes bench/results/serving.json."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench.isolated import isolated_services
from bench.wrk import millis, paced
from counting import keys
from counting.traffic import TrafficConfig, catalog_rows
from tally.loadgen import post_traffic
from tally.speedview import counter_caught_up, wait_until
from tally.stack import start_stack
from tally.traffic_run import generate_items
from warehouse.migrate import migrate
from warehouse.store import catalog, open_store, upsert_catalog

RESULTS = Path(__file__).parent / "results"


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _redis_floor(url: str, n: int = 5_000) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.set("bench:floor", "1")
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        client.get("bench:floor")
        samples.append((time.perf_counter() - started) * 1000)
    client.close()
    return {"p50_ms": _percentile(samples, 0.5), "p99_ms": _percentile(samples, 0.99)}


def _cpu_ticks(pid: int) -> int:
    """User plus system CPU time of a process, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _machine_ticks() -> tuple[int, int]:
    """Busy and total CPU ticks of the whole machine."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


# The routes timed, as a wrk Lua expression of the path of a random id from `ids`.
ROUTES = {
    "stats": '"/v1/videos/" .. ids[math.random(#ids)] .. "/stats"',
    "rank": '"/v1/videos/" .. ids[math.random(#ids)] .. "/rank"',
    "creator": '"/v1/creators/" .. ids[math.random(#ids)] .. "/stats"',
}


def _wrk(
    base: str,
    ids: list[str],
    connections: int,
    seconds: float,
    work: Path,
    pids: dict[str, int],
    rate: float | None = None,
    route: str = "stats",
) -> dict[str, Any]:
    """Load a route with wrk (`connections` at once, random ids: videos, or creators for the creator
    route): closed loop, or paced at `rate` requests/s. Also the CPU each process in `pids` and wrk
    spent, per request and as a share."""
    script = work / f"{route}.lua"
    names = ",".join(f'"{v}"' for v in ids)
    script.write_text(
        paced(
            f"local ids = {{{names}}}\n"
            "request = function()\n"
            f'  return wrk.format("GET", {ROUTES[route]})\n'
            "end\n",
            rate,
        )
    )
    command = ["wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--latency", "-s", str(script), base]
    before = {name: _cpu_ticks(pid) for name, pid in pids.items()}
    machine_before = _machine_ticks()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    elapsed = time.monotonic() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures: dict[str, Any] = {"route": route, "connections": connections}
    if rate:
        figures["offered_rps"] = rate
    for line in out.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            figures["rps"] = float(words[1])
        elif len(words) == 2 and words[0] in ("50%", "90%", "99%"):
            figures[f"p{words[0][:-1]}_ms"] = millis(words[1])
        elif "Non-2xx" in line:
            figures["non_2xx"] = float(words[-1])
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {name: (_cpu_ticks(pid) - before[name]) / tick for name, pid in pids.items()}
    cpu["wrk"] = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    requests = max(1.0, figures.get("rps", 0.0) * elapsed)
    figures["serving_cpu_us_per_request"] = round(cpu["serving"] / requests * 1e6, 1)
    shares = {name: round(used / elapsed / multiprocessing.cpu_count(), 3) for name, used in cpu.items()}
    busy, total = (after - before for after, before in zip(_machine_ticks(), machine_before, strict=True))
    shares["machine_busy"] = round(busy / max(1, total), 3)
    figures["cpu_share_of_machine"] = shares
    return figures


def _buckets_per_video(client: redis.Redis, videos: list[str]) -> float:
    """How many speed buckets a read sums, on average (no baseline: every bucket since the start)."""
    pipe = client.pipeline(transaction=False)
    for video in videos:
        pipe.zcard(keys.buckets_index(video))
    return round(sum(pipe.execute()) / max(1, len(videos)), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each load phase")
    parser.add_argument(
        "--connections", type=int, nargs="+", default=[2, 4, 8, 16], help="wrk connections of each phase"
    )
    parser.add_argument(
        "--rate", type=float, default=2_000.0, help="requests/s offered by the paced phase (0: none)"
    )
    parser.add_argument("--paced-connections", type=int, default=32, help="wrk connections when paced")
    parser.add_argument(
        "--other-connections",
        type=int,
        default=8,
        help="wrk connections of the rank and creator routes' phases",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tally-bench-serving-"))
    broker, store, settings = isolated_services(work)
    stack = start_stack(settings, reset=True)
    stop = threading.Event()
    try:
        ingest = f"http://127.0.0.1:{settings.ingest_port}"
        base = f"http://127.0.0.1:{settings.serving_port}"
        print("loading 20,000 events through the ingest API …", flush=True)
        sent = post_traffic(
            generate_items(20_000, 5_000.0, 1, 500, True), ingest, settings.collector_key, realtime=False
        )
        client = redis.Redis.from_url(settings.redis_url)
        wait_until(lambda: counter_caught_up(client, settings), 120, "the counter catching up")
        videos = sorted({e.video_id for e in sent.events})
        migrate(settings.store_url)
        with open_store(settings.store_url) as catalog_store:
            upsert_catalog(catalog_store, catalog_rows(TrafficConfig(seed=1, videos=500)))
            creators = sorted({row.creator_id for row in catalog(catalog_store).values()})

        fed = [0]

        def background() -> None:
            seed = 100
            while not stop.is_set():
                seed += 1
                with contextlib.suppress(RuntimeError):  # the stack stopping under the feeder
                    batch = post_traffic(
                        generate_items(2_000, 1_000.0, seed, 500, False), ingest, settings.collector_key
                    )
                    fed[0] += len(batch.events)

        feeder = threading.Thread(target=background, daemon=True)
        feeder.start()
        print("timing the Redis GET floor …", flush=True)
        floor = _redis_floor(settings.redis_url)
        pids = {"serving": stack.get("serving").pid, "redis": store.process.pid}
        loading = time.monotonic()
        runs = []
        for connections in args.connections:
            print(f"wrk: {connections} connections for {args.seconds:.0f} s …", flush=True)
            buckets = _buckets_per_video(client, videos)
            runs.append(_wrk(base, videos, connections, args.seconds, work, pids))
            runs[-1]["speed_buckets_per_read"] = buckets
        paced = None
        if args.rate > 0:
            print(f"wrk: {args.rate:,.0f} requests/s offered for {args.seconds:.0f} s …", flush=True)
            buckets = _buckets_per_video(client, videos)
            paced = _wrk(base, videos, args.paced_connections, args.seconds, work, pids, args.rate)
            paced["speed_buckets_per_read"] = buckets
        others = []
        for route, ids in (("rank", videos), ("creator", creators)):
            print(f"wrk: the {route} route, {args.other_connections} connections for {args.seconds:.0f} s …")
            others.append(_wrk(base, ids, args.other_connections, args.seconds, work, pids, route=route))
        fed_per_sec = fed[0] / (time.monotonic() - loading)
        stop.set()
        feeder.join(timeout=30)
        client.close()
    finally:
        stop.set()
        stack.stop()
        store.stop()
        broker.stop()
    figures: dict[str, Any] = {
        "benchmark": "serving",
        "machine": {
            "cpus": multiprocessing.cpu_count(),
            "cpu_model": _cpu_model(),
            "platform": platform.platform(),
        },
        "videos": len(videos),
        "events_per_sec_fed_while_loading": round(fed_per_sec),
        "redis_get_floor": floor,
        "runs": runs,
        "best_rps_with_p99_within_10ms": max((r["rps"] for r in runs if r["p99_ms"] <= 10.0), default=0.0),
        "p99_vs_redis_floor": [round(r["p99_ms"] / floor["p99_ms"], 1) for r in runs],
        "paced": paced,
        "other_routes": others,
        "creators": len(creators),
        "target": {"p99_ms_at_most": 10.0, "rps_at_least": 2_000.0},
    }
    figures["meets_target"] = figures["best_rps_with_p99_within_10ms"] >= 2_000.0
    # Issue 48's other routes: rank >= 2,000 requests/s at p99 <= 10 ms, creator at p99 <= 20 ms.
    for other in others:
        route = other["route"]
        figures[f"{route}_rps"], figures[f"{route}_p99_ms"] = other["rps"], other["p99_ms"]
        within = {"rank": 10.0, "creator": 20.0}[route]
        figures[f"{route}_meets_target"] = other["rps"] >= 2_000.0 and other["p99_ms"] <= within
    if paced is not None:  # the offered rate reached within 1 % (wrk counts the start-up second too)
        reached = paced["rps"] >= 0.99 * paced["offered_rps"] and paced["offered_rps"] >= 2_000.0
        figures["paced_meets_target"] = reached and paced["p99_ms"] <= 10.0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serving.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
