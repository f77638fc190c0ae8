"""Benchmark freshness: the time from the ingest API's acknowledgement to the event being visible in
the stats route, while the platform ingests a steady load.

`python -m bench.freshness [--rate 20000] [--seconds 30] [--redis-cluster]` starts the local stack
on free ports (a fresh Tansu broker, a redis-server of its own or, with `--redis-cluster`, a local
Redis Cluster of 3 masters and the counter with its state in the worker; both Faust workers, both
APIs), posts background traffic through the ingest API at `--rate` events a second from two loader
processes, and every 100 ms posts one tracer view (a new viewer of the video `tracer`), then polls
the stats route until the tracer's view is counted. Prints one line of JSON (with, per 30 s of the
run, the tracers' p99 and the cores the broker and the counter used) and writes
bench/results/freshness.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec

from bench.machine import cpu_seconds, machine
from bench.speed_traffic import REQUEST_EVENTS, generate
from counting.settings import Settings
from tally.redis_cluster import free_first_port, start_cluster, stop_cluster
from tally.secrets import with_local_secrets
from tally.services import free_port, free_ports
from tally.stack import start_stack

RESULTS = Path(__file__).parent / "results"
TRACER_EVERY_S = 0.1
POLL_EVERY_S = 0.005
WINDOW_S = 30


def _loader(ingest_url: str, key: str, rate: float, seconds: float, seed: int, sent: Any) -> None:
    """Post generated events in requests of REQUEST_EVENTS at `rate` events a second.

    Every request body is encoded before the clock starts (each event's `ts` set a second before the
    moment its request is due), so the loader spends its CPU on sending, not on building JSON: on
    two cores it shares the machine with the stack it measures."""
    n = int(rate * seconds) + REQUEST_EVENTS
    events = generate(n, 2_000, max(1_000, n // 5), seed, int(time.time() * 1000), rate)
    encoder = msgspec.json.Encoder()
    fields = ("event_id", "type", "video_id", "ts", "user_id", "session_id", "ip", "user_agent", "watch_secs")
    lead_s = 1.0 + n / 200_000  # encoding takes about 5 µs an event; start once it is done
    start_ms = int((time.time() + lead_s) * 1000)
    bodies: list[bytes] = []
    for i in range(0, n, REQUEST_EVENTS):
        due_ms = start_ms + int(i / rate * 1000)
        batch = []
        for event in events[i : i + REQUEST_EVENTS]:
            body = {f: getattr(event, f) for f in fields if getattr(event, f) is not None}
            body["ts"] = due_ms - 1_000
            batch.append(body)
        bodies.append(encoder.encode({"events": batch}))
    del events
    started = max(time.monotonic(), time.monotonic() + (start_ms / 1000 - time.time()))
    with httpx.Client(base_url=ingest_url, timeout=30.0, headers={"x-collector-key": key}) as client:
        for k, content in enumerate(bodies):
            pause = started + k * REQUEST_EVENTS / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if time.monotonic() - started > seconds:
                break
            answer = client.post("/v1/events", content=content)
            if answer.status_code >= 500:
                continue
            with sent.get_lock():
                sent.value += answer.json()["accepted"]


def _tracers(ingest_url: str, key: str, serving_url: str, seconds: float) -> list[tuple[float, float]]:
    """Post a tracer view every TRACER_EVERY_S; of each, when it was acknowledged (s into the run)
    and its latency (ms) from ack to visible (inf: never seen)."""
    acked: list[float] = []
    seen: dict[int, float] = {}
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=serving_url, timeout=5.0) as client:
            while not stop.is_set():
                views = int(client.get("/v1/videos/tracer/stats").json()["views"])
                moment = time.perf_counter()
                for k in range(1, views + 1):
                    seen.setdefault(k, moment)
                time.sleep(POLL_EVERY_S)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    with httpx.Client(base_url=ingest_url, timeout=30.0, headers={"x-collector-key": key}) as client:
        started = time.monotonic()
        k = 0
        while time.monotonic() - started < seconds:
            k += 1
            now = int(time.time() * 1000)
            body = {
                "event_id": f"tracer-{k}",
                "type": "view",
                "video_id": "tracer",
                "session_id": f"tracer-session-{k}",
                "user_id": f"tracer-viewer-{k}",
                "ts": now,
                "watch_secs": 60,
                "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0",
            }
            answer = client.post("/v1/events", json={"events": [body]})
            answer.raise_for_status()
            acked.append(time.perf_counter())
            time.sleep(TRACER_EVERY_S)
    deadline = time.monotonic() + 30
    while len(seen) < len(acked) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    poller.join(5)
    first = acked[0] if acked else 0.0
    return [
        (acked[k - 1] - first, (seen[k] - acked[k - 1]) * 1000 if k in seen else float("inf"))
        for k in range(1, len(acked) + 1)
    ]


class _Cores:
    """The cores each of some processes used in each WINDOW_S of the run, sampled by a thread."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self.by_window: dict[str, dict[str, float]] = {name: {} for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _Cores:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        before = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        window, began = 0, time.monotonic()
        while True:
            stopped = self._stop.wait(WINDOW_S)
            seconds = time.monotonic() - began  # the last window may be shorter
            for name, pid in self._pids.items():
                try:
                    now = cpu_seconds(pid)
                except OSError:  # the process is gone
                    continue
                label = f"{window * WINDOW_S}-{window * WINDOW_S + round(seconds)}"
                self.by_window[name][label] = round((now - before[name]) / seconds, 2)
                before[name] = now
            if stopped:
                return
            window, began = window + 1, time.monotonic()


def _by_window(tracers: list[tuple[float, float]]) -> dict[str, float]:
    """p99 of the tracers acknowledged in each WINDOW_S of the run ("0-30": the first 30 s): a
    counter that falls behind shows a growing tail, where the run's p99 alone hides when."""
    windows: dict[int, list[float]] = {}
    for at, latency in tracers:
        windows.setdefault(int(at // WINDOW_S), []).append(latency)
    return {
        f"{w * WINDOW_S}-{(w + 1) * WINDOW_S}": round(_percentile(samples, 0.99), 1)
        for w, samples in sorted(windows.items())
    }


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__)
    parser.add_argument("--rate", type=float, default=20_000.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--redis-cluster", action="store_true", help="run on a local Redis Cluster")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tally-fresh-") as tmp:
        settings = Settings(
            data_dir=Path(tmp) / "data",
            kafka_bootstrap=f"127.0.0.1:{free_port()}",
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            ingest_port=free_port(),
            serving_port=free_port(),
            faust_web_port=free_ports(2),
            bucket_ms=60_000,
        )
        settings = with_local_secrets(settings)  # the collector key the stack's ingest API checks
        if args.redis_cluster:
            cluster, _ = start_cluster(settings, free_first_port())
            settings = settings.model_copy(update={"redis_url": cluster.url, "redis_cluster": True})
        print("starting the stack", file=sys.stderr)
        try:
            stack = start_stack(settings, reset=True)
        except BaseException:
            stop_cluster(settings)
            raise
        try:
            ingest = f"http://127.0.0.1:{settings.ingest_port}"
            serving = f"http://127.0.0.1:{settings.serving_port}"
            key = settings.collector_key
            _warm_up(ingest, key, serving)
            sent = multiprocessing.Value("q", 0)
            loaders = [
                multiprocessing.Process(
                    target=_loader, args=(ingest, key, args.rate / 2, args.seconds, seed, sent)
                )
                for seed in (1, 2)
            ]
            for loader in loaders:
                loader.start()
            deadline = time.monotonic() + 120
            while sent.value == 0 and time.monotonic() < deadline:  # loaders generate their traffic first
                time.sleep(0.1)
            print(f"loading at {args.rate:.0f} events/s with tracers", file=sys.stderr)
            started = time.monotonic()
            with _Cores({name: stack.get(name).pid for name in ("broker", "counter")}) as cores:
                tracers = _tracers(ingest, key, serving, args.seconds - 4)
            for loader in loaders:
                loader.join(args.seconds + 60)
            elapsed = time.monotonic() - started
        finally:
            stack.stop()
            stop_cluster(settings)
    latencies = [latency for _, latency in tracers]
    result = {
        "benchmark": "freshness",
        "redis_cluster": settings.redis_cluster,
        "rate_target": args.rate,
        "rate_achieved": round(sent.value / max(elapsed, 1e-9)),
        "tracers": len(latencies),
        "p50_ms": round(_percentile(latencies, 0.5), 1),
        "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1),
        "p99_ms_by_window": _by_window(tracers),
        "broker_cores_by_window": cores.by_window["broker"],
        "counter_cores_by_window": cores.by_window["counter"],
        "machine": machine(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "freshness.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


def _warm_up(ingest: str, key: str, serving: str) -> None:
    """Wait until a first view is counted end to end (the workers have joined their groups)."""
    now = int(time.time() * 1000)
    body = {
        "event_id": "warm-up",
        "type": "view",
        "video_id": "warmup",
        "session_id": "w",
        "user_id": "w",
        "ts": now,
        "watch_secs": 60,
    }
    deadline = time.monotonic() + 120
    with httpx.Client(timeout=10.0) as client:
        headers = {"x-collector-key": key}
        client.post(f"{ingest}/v1/events", json={"events": [body]}, headers=headers).raise_for_status()
        while time.monotonic() < deadline:
            if client.get(f"{serving}/v1/videos/warmup/stats").json()["views"] >= 1:
                return
            time.sleep(0.2)
    raise RuntimeError("the stack did not count a first view within 120 s")


if __name__ == "__main__":
    main()
