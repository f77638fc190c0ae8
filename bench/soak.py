"""Soak: a steady load through the ingest API for minutes while faults are injected on a schedule;
at the end every acknowledged event must be counted once and archived once, and no process may
have grown beyond a bound (the checks are `bench.soak_checks`; `tests/system/test_soak.py` runs a
short soak and asserts on them).

`python -m bench.soak [--minutes 10] [--rate 1000] [--batch 100] [--faults counter,broker,...]`
starts a stack of its own (a Tansu broker and a redis-server on free ports, both Faust workers,
both APIs, a temporary data directory), posts generated traffic without bots (so that the speed
layer, the batch and the oracle agree exactly) from eight sender threads, reads the stats route
`--read-rate` times a second, and injects the faults one after another, spread between a warm-up
and a quiet tail (a fault still due with less than 20 s, or a quarter of the load, left is
skipped, and the run fails). Faults (bench/soak_faults.py):

  counter, archiver, counter+archiver  SIGKILL the worker(s), start again
  broker          SIGSTOP the broker for 10 s, then SIGCONT (a restart would empty its in-memory log)
  spark           a batch SIGKILLed while it writes, then re-run; the old baseline serves meanwhile
  redis-flush     FLUSHALL, then docs/operations.md's repair: counter stopped, `tally speed rebuild`,
  redis-restart   counter started (the restart: redis-server SIGKILLed and started empty)

Then it waits for the counter and the archiver to catch up and checks: the counted figures of
every video in Redis and in the stats route equal `counting.oracle.count` over the acknowledged
events; the counter's event markers number the acknowledged event ids (heartbeats have none);
every acknowledged (event_id, ingest_ts) is in the Parquet log exactly as often as it was
acknowledged. Memory: RSS of each process when the first fault is due and at the end; the bound is
1.5 x start + 50 MB, plus 1 KiB per acknowledged event for the broker and Redis (whose data grows
with the log by design: Tansu's memory engine keeps every record, Redis the markers of a day).

Prints progress to stderr, then one line of JSON; writes bench/results/soak.json (or `--out`).
Exit status 1 when a check failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.isolated import isolated_services, run_in_work_dir
from bench.soak_checks import MEMORY_BOUND, WARM_UP_EVENT_ID, check, counts_equal, memory
from bench.soak_faults import DEFAULT_SCHEDULE, FAULTS, Faults, Rig
from bench.soak_load import Loader, LoadFigures, MemorySampler, Progress, Reader, latency_figures
from counting.settings import Settings
from tally.speedview import counter_caught_up, wait_until
from tally.stack import start_stack

RESULTS = Path(__file__).parent / "results"
MIN_LOAD_LEFT_S = 20.0  # a fault still due this close to the end of the load (at most) is skipped


def _log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version()}


def _warm_up(settings: Settings) -> None:
    """Wait until a first view is counted end to end (the workers have joined their groups)."""
    now = time.time_ns() // 1_000_000
    view = {"event_id": WARM_UP_EVENT_ID, "type": "view", "video_id": "warmup", "session_id": "w"}
    body = {"events": [{**view, "user_id": "w", "ts": now, "watch_secs": 60}]}
    headers = {"x-collector-key": settings.collector_key}
    with httpx.Client(timeout=10.0) as client:
        ingest, serving = (
            f"http://127.0.0.1:{settings.ingest_port}",
            f"http://127.0.0.1:{settings.serving_port}",
        )
        client.post(f"{ingest}/v1/events", json=body, headers=headers).raise_for_status()
        wait_until(
            lambda: client.get(f"{serving}/v1/videos/warmup/stats").json()["views"] >= 1,
            120,
            "a first view counted end to end",
        )


def _schedule(seconds: float, faults: list[str]) -> list[tuple[float, str]]:
    """When each fault is due (seconds from the start of the load): spread evenly between a
    warm-up and a quiet tail in which the platform recovers under load."""
    warm_up = min(30.0, seconds * 0.15)
    tail = min(60.0, seconds * 0.2)
    step = (seconds - warm_up - tail) / max(1, len(faults))
    return [(warm_up + i * step, name) for i, name in enumerate(faults)]


def _progress_line(rig: Rig, load: LoadFigures, reader: Reader, started: float, fault: list[str]) -> str:
    lag = time.time() - rig.watermark() / 1000
    return (
        f"t={time.monotonic() - started:.0f}s acked={load.count()} refused_requests={load.refusals()} "
        f"counter_records={rig.stored_records()} archive_lag_s={lag:.1f} "
        f"reads={len(reader.figures.ok_ms)} degraded_reads={reader.figures.degraded} fault={fault[0]}"
    )


def soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    seconds = args.minutes * 60
    broker, store, settings = isolated_services(work)
    _log(f"starting the stack under {work}")
    rig = Rig(settings, start_stack(settings, reset=True), broker, store, _log)
    ingest, serving = (
        f"http://127.0.0.1:{settings.ingest_port}",
        f"http://127.0.0.1:{settings.serving_port}",
    )
    loader = Loader(ingest, settings.collector_key, args.rate, seconds, args.batch)
    load = loader.figures

    def videos() -> list[str]:
        with load.lock:
            return load.videos

    reader = Reader(serving, args.read_rate, videos)
    try:
        _warm_up(settings)
        sampler = MemorySampler(rig.pids)
        faults = Faults(rig, load)
        current = ["none"]
        started = time.monotonic()
        progress = Progress(lambda: _progress_line(rig, load, reader, started, current), _log)
        _log(f"load: {args.rate:.0f} events/s for {seconds:.0f} s; faults: {','.join(args.faults) or '-'}")
        loader.start()
        reader.start()
        progress.start()
        done: list[dict[str, Any]] = []
        schedule = _schedule(seconds, args.faults)
        warm = schedule[0][0] if schedule else min(30.0, seconds * 0.15)
        time.sleep(max(0.0, started + warm - time.monotonic()))
        sampler.begin()
        for due, name in schedule:
            time.sleep(max(0.0, started + due - time.monotonic()))
            if not loader.alive() or time.monotonic() - started > seconds - min(MIN_LOAD_LEFT_S, seconds / 4):
                done.append({"fault": name, "ok": False, "error": "skipped: the load was over"})
                continue
            current[0] = name
            done.append(faults.run(name, time.monotonic() - started))
            current[0] = "none"
        loader.join()
        elapsed = loader.seconds()
        _log(f"load over after {elapsed:.0f} s: {load.count()} events acknowledged; waiting for catch-up")
        reader.stop()
        progress.stop()
        last_ack = max((ts for _, ts in load.acked), default=0)
        with rig.client() as client:
            wait_until(lambda: counter_caught_up(client, settings), 600, "the counter catching up", 1.0)
        wait_until(lambda: rig.watermark() > last_ack, 600, "the archiver archiving everything", 1.0)
        sampler.finish()
        _log("caught up; checking against the oracle")
        checked = check(rig, load)
    finally:
        loader.stop()
        reader.stop()
        os.kill(rig.broker.process.pid, signal.SIGCONT)
        rig.stack.stop()
        rig.redis.stop()
        rig.broker.stop()
    memory_figures, memory_ok = memory(sampler, checked["events_acknowledged"])
    read = reader.figures
    equal = counts_equal(checked)
    faults_ok = all(f.get("ok") for f in done)
    return {
        "benchmark": "soak",
        "minutes": args.minutes,
        "rate_target": args.rate,
        "rate_achieved": round(checked["events_acknowledged"] / elapsed),
        "requests": load.requests,
        **checked,
        "refused_then_resent": {
            "refusals": load.refused_requests,
            "requests": load.resent_requests,
            "events": load.resent_events,
        },
        "invalid_events": len(load.invalid),
        "ingest_ms": latency_figures(load.ack_ms),
        "read_ms": {
            **latency_figures(read.ok_ms),
            "reads": len(read.ok_ms),
            "statuses": {str(k): n for k, n in sorted(read.statuses.items())},
            "errors": read.errors,
            "degraded": read.degraded,
        },
        "memory": memory_figures,
        "memory_bound": MEMORY_BOUND,
        "faults": done,
        "counts_equal": equal,
        "memory_ok": memory_ok,
        "faults_ok": faults_ok,
        "ok": equal and memory_ok and faults_ok and loader.error is None,
        "loader_error": repr(loader.error) if loader.error else None,
        "machine": _machine(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--rate", type=float, default=1_000.0, help="events a second (default 1,000)")
    parser.add_argument("--batch", type=int, default=100, help="events per request at most (default 100)")
    parser.add_argument("--read-rate", type=float, default=20.0, help="stats reads a second (default 20)")
    parser.add_argument(
        "--faults",
        type=lambda text: [f for f in text.split(",") if f],
        default=list(DEFAULT_SCHEDULE),
        help=f"comma-separated, in order, from {', '.join(FAULTS)} (default: {','.join(DEFAULT_SCHEDULE)})",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json", help="where to write the JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and logs")
    args = parser.parse_args(argv)
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    return run_in_work_dir("tally-soak-", lambda work: soak(args, work), args.out, args.keep, _log)


if __name__ == "__main__":
    sys.exit(0 if main().get("ok") else 1)
