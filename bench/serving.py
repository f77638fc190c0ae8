"""Benchmark the stats route under concurrent clients while the speed layer counts, against a
plain Redis GET round trip measured in the same run. `python -m bench.serving [--seconds N]`.

Prints progress, then one line of JSON; writes bench/results/serving.json."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from counting.settings import Settings
from tally.loadgen import post_traffic
from tally.services import free_port, start_broker, start_redis
from tally.speedview import counter_caught_up, wait_until
from tally.stack import start_stack
from tally.traffic_run import generate_items

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


async def _open_loop(base: str, videos: list[str], rate: float, seconds: float) -> dict[str, float]:
    """Send `rate` requests a second for `seconds` regardless of answers; latency per request."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=5.0) as client:

        async def one(video: str) -> None:
            nonlocal errors
            started = time.perf_counter()
            try:
                answer = await client.get(f"/v1/videos/{video}/stats")
                if answer.status_code != 200:
                    errors += 1
            except httpx.HTTPError:
                errors += 1
            latencies.append((time.perf_counter() - started) * 1000)

        tasks = []
        began = time.perf_counter()
        sent = 0
        while (elapsed := time.perf_counter() - began) < seconds:
            due = int(elapsed * rate)
            while sent < due:
                tasks.append(asyncio.create_task(one(random.choice(videos))))
                sent += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        took = time.perf_counter() - began
    return {
        "requests": len(latencies),
        "achieved_rps": len(latencies) / took,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "mean_ms": statistics.fmean(latencies),
        "errors": errors,
    }


async def _closed_loop(base: str, videos: list[str], clients: int, seconds: float) -> dict[str, float]:
    """`clients` connections asking back to back: the route's throughput."""
    done = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await client.get(f"/v1/videos/{random.choice(videos)}/stats")
                latencies.append((time.perf_counter() - started) * 1000)
                done += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        took = time.perf_counter() - began
    return {
        "clients": clients,
        "rps": done / took,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
    }


def _client_process(kind: str, base: str, videos: list[str], arg: float, seconds: float, out: Any) -> None:
    """Run the load in its own process so it does not share the server's interpreter."""
    if kind == "open":
        out.put(asyncio.run(_open_loop(base, videos, arg, seconds)))
    else:
        out.put(asyncio.run(_closed_loop(base, videos, int(arg), seconds)))


def _run_client(kind: str, base: str, videos: list[str], arg: float, seconds: float) -> dict[str, float]:
    queue: multiprocessing.Queue[dict[str, float]] = multiprocessing.Queue()
    process = multiprocessing.Process(target=_client_process, args=(kind, base, videos, arg, seconds, queue))
    process.start()
    result = queue.get(timeout=seconds + 120)
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each load phase")
    parser.add_argument("--rate", type=float, default=2_000.0, help="open-loop request rate")
    parser.add_argument("--clients", type=int, default=32, help="closed-loop concurrent clients")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tally-bench-serving-"))
    broker = start_broker(free_port(), work / "logs")
    store = start_redis(free_port(), work / "logs")
    settings = Settings(
        data_dir=work / "data",
        bucket_ms=10_000,
        kafka_bootstrap=f"127.0.0.1:{broker.port}",
        redis_url=f"redis://127.0.0.1:{store.port}/0",
        ingest_port=free_port(),
        serving_port=free_port(),
        faust_web_port=free_port(),
    )
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

        def background() -> None:
            seed = 100
            while not stop.is_set():
                seed += 1
                post_traffic(generate_items(2_000, 1_000.0, seed, 500, False), ingest, settings.collector_key)

        feeder = threading.Thread(target=background, daemon=True)
        feeder.start()
        print("timing the Redis GET floor …", flush=True)
        floor = _redis_floor(settings.redis_url)
        print(f"open loop at {args.rate:.0f} requests/s for {args.seconds:.0f} s …", flush=True)
        open_loop = _run_client("open", base, videos, args.rate, args.seconds)
        print(f"closed loop with {args.clients} clients for {args.seconds:.0f} s …", flush=True)
        closed_loop = _run_client("closed", base, videos, args.clients, args.seconds)
        stop.set()
        feeder.join(timeout=30)
        client.close()
    finally:
        stop.set()
        stack.stop()
        store.stop()
        broker.stop()
    figures = {
        "benchmark": "serving",
        "machine": {"cpus": multiprocessing.cpu_count(), "platform": platform.platform()},
        "videos": len(videos),
        "redis_get_floor": floor,
        "open_loop": open_loop,
        "closed_loop": closed_loop,
        "p99_vs_redis_floor": open_loop["p99_ms"] / floor["p99_ms"],
        "target": {"p99_ms_at_most": 10.0, "rps_at_least": 2_000.0},
        "meets_target": open_loop["p99_ms"] <= 10.0 and open_loop["achieved_rps"] >= 2_000 * 0.97,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serving.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
