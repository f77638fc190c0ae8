"""Benchmark the stats route under concurrent clients (wrk, one serving worker process) while the
speed layer counts, against a plain Redis GET round trip measured in the same run.
`python -m bench.serving [--seconds N] [--connections 2 4 8 16]`.

Prints progress, then one line of JSON; writes bench/results/serving.json."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path

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


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _millis(text: str) -> float:
    number = text.rstrip("usm")
    return float(number) * _UNITS[text[len(number) :]]


def _wrk(base: str, videos: list[str], connections: int, seconds: float, work: Path) -> dict[str, float]:
    """Load the stats route with wrk (closed loop, `connections` at once, random videos)."""
    script = work / "stats.lua"
    names = ",".join(f'"{v}"' for v in videos)
    script.write_text(
        f"local videos = {{{names}}}\n"
        "request = function()\n"
        '  return wrk.format("GET", "/v1/videos/" .. videos[math.random(#videos)] .. "/stats")\n'
        "end\n"
    )
    command = ["wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--latency", "-s", str(script), base]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = {"connections": connections}
    for line in out.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            figures["rps"] = float(words[1])
        elif len(words) == 2 and words[0] in ("50%", "90%", "99%"):
            figures[f"p{words[0][:-1]}_ms"] = _millis(words[1])
        elif "Non-2xx" in line:
            figures["non_2xx"] = float(words[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each load phase")
    parser.add_argument(
        "--connections", type=int, nargs="+", default=[2, 4, 8, 16], help="wrk connections of each phase"
    )
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
                with contextlib.suppress(RuntimeError):  # the stack stopping under the feeder
                    post_traffic(
                        generate_items(2_000, 1_000.0, seed, 500, False), ingest, settings.collector_key
                    )

        feeder = threading.Thread(target=background, daemon=True)
        feeder.start()
        print("timing the Redis GET floor …", flush=True)
        floor = _redis_floor(settings.redis_url)
        runs = []
        for connections in args.connections:
            print(f"wrk: {connections} connections for {args.seconds:.0f} s …", flush=True)
            runs.append(_wrk(base, videos, connections, args.seconds, work))
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
        "runs": runs,
        "best_rps_with_p99_within_10ms": max((r["rps"] for r in runs if r["p99_ms"] <= 10.0), default=0.0),
        "p99_vs_redis_floor": [round(r["p99_ms"] / floor["p99_ms"], 1) for r in runs],
        "target": {"p99_ms_at_most": 10.0, "rps_at_least": 2_000.0},
    }
    figures["meets_target"] = figures["best_rps_with_p99_within_10ms"] >= 2_000.0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serving.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
