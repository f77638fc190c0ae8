"""Benchmark the write API while the speed layer counts: the like route and one-event
`POST /v1/events` at paced rates, 500-event batches as fast as they are answered, with 1, 2 and 4
ingest processes on one port; then check that every acknowledged write was archived and counted.
`python -m bench.ingest [--seconds N] [--workers 1 2 4] [--like-rates ...] [--quick]`.

Each worker count gets a fresh stack of its own (a Tansu broker and a redis-server on free ports,
both Faust workers, both APIs, `ingest_workers` set): the local broker's work per consumer fetch
grows with the log it keeps in memory, so runs sharing one stack would not compare. The paced
phases run wrk with a Lua `delay()` that keeps one request every 1/rate s over its connections; wrk
times from the send, so a stall's backlog is not counted (no coordinated-omission correction: wrk2
is not available). The like route's requests rotate over pregenerated tokens of many users and over
many videos. Every request comes from 127.0.0.1, so the bench raises `rate_limit_ip_per_min` and
`rate_limit_user_per_min` (both limits are still checked on every request: the same Redis work,
never a refusal). Each phase records the CPU time of the ingest processes (per request) and the
share of the machine each process took, since all share its cores with wrk.

The check, per stack: the counter and the archiver catch up; every like the API answered 202 (by
the event id in its answer) and every event of an acknowledged batch is in the Parquet log; at least
as many one-event requests were archived as were acknowledged; and the counter's views and likes of
every video equal `counting.oracle.count` over the archived log (which also holds the writes of
requests that wrk abandoned unanswered at the end of a phase). Exit status 1 when a write was lost
or counted wrong.

Prints progress to stderr, then one line of JSON; writes bench/results/ingest.json (or `--out`).
The load of each phase (the wrk scripts, the bodies, the batch senders, the CPU meter) is
`bench.ingest_load`.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pyarrow.dataset as ds
import redis

from bench.ingest_load import (
    BATCH_SIZE,
    LIKE_SCRIPT,
    SINGLE_SCRIPT,
    VIDEOS,
    CpuMeter,
    batches,
    now_ms,
    run_wrk,
    single_bodies,
    with_children,
)
from bench.isolated import isolated_services, run_in_work_dir
from bench.wrk import paced
from counting import oracle
from counting.event import Event
from counting.logschema import EVENT_COLUMNS
from counting.settings import Settings
from ingest.auth import issue_token
from tally.speedview import counter_caught_up, speed_totals, wait_until, watermark
from tally.stack import start_stack

RESULTS = Path(__file__).parent / "results"
REFERENCE_RPS = 2_000.0  # the offered rate of the like route's target
TARGET_P99_MS = 10.0
TARGET_BATCH_EVENTS_PER_S = 100_000.0
USERS = 20_000
# All requests come from 127.0.0.1: limits no run reaches (the scripts still run on every request).
RAISED_LIMITS = {"rate_limit_ip_per_min": 1_000_000_000, "rate_limit_user_per_min": 1_000_000}


def _log(message: str) -> None:
    print(f"[ingest-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _machine() -> dict[str, Any]:
    model = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform()}


def _caught_up(settings: Settings, client: redis.Redis, what: str) -> None:
    """Wait until the counter has counted and the archiver archived everything written so far. The
    counter is waited for again once the archiver has caught up: a request still in the ingest API
    when the topic's ends were first sampled (a client gave up on it) reaches the log, and must
    reach the counter before the two are compared."""
    written_before = now_ms()
    wait_until(lambda: counter_caught_up(client, settings), 600, f"the counter catching up ({what})", 0.5)
    wait_until(lambda: watermark(client) > written_before, 600, f"the archiver catching up ({what})", 0.5)
    wait_until(lambda: counter_caught_up(client, settings), 600, f"the counter catching up ({what})", 0.5)


def _warm_up(base: str, work: Path) -> None:
    """A few seconds of light like traffic (every worker process connects and warms its clients)."""
    script = work / "warm.lua"
    script.write_text(paced((work / "like.lua").read_text().replace("SEED", "1"), 100.0))
    subprocess.run(["wrk", "-t1", "-c8", "-d3s", "-s", str(script), base], capture_output=True, check=True)


def _phases(
    args: argparse.Namespace, settings: Settings, client: redis.Redis, work: Path, meter: CpuMeter
) -> dict[str, Any]:
    """The load phases against one stack: paced likes, closed-loop likes, paced one-event batches,
    then closed-loop 500-event batches (the largest volume last: the log only grows)."""
    workers = settings.ingest_workers
    base = f"http://127.0.0.1:{settings.ingest_port}"
    _warm_up(base, work)
    figures: dict[str, Any] = {"like_paced": [], "single_paced": []}
    like = (work / "like.lua").read_text()
    for seed, rate in enumerate(args.like_rates, start=2):
        _log(f"{workers} ingest process(es): likes at {rate:,.0f}/s for {args.seconds:.0f} s")
        script = work / "like-paced.lua"
        script.write_text(paced(like.replace("SEED", str(seed)), rate))
        run = run_wrk(script, base, args.connections, args.seconds, meter)
        figures["like_paced"].append({"offered_rps": rate, **run})
    if args.closed_connections:
        _log(f"{workers} ingest process(es): likes closed-loop, {args.closed_connections} connections")
        script = work / "like-closed.lua"
        script.write_text(like.replace("SEED", "99"))
        figures["like_closed"] = run_wrk(script, base, args.closed_connections, args.seconds, meter)
    for rate in args.single_rates:
        _log(f"{workers} ingest process(es): one-event POST /v1/events at {rate:,.0f}/s")
        bodies = work / f"single-{rate:.0f}.jsonl"
        single_bodies(bodies, f"s{rate:.0f}-", int(rate * (args.seconds + 2)))
        script = work / "single.lua"
        script.write_text(
            paced(SINGLE_SCRIPT.replace("BODIES", str(bodies)).replace("KEY", settings.collector_key), rate)
        )
        run = run_wrk(script, base, args.connections, args.seconds, meter)
        figures["single_paced"].append({"offered_rps": rate, **run})
    _caught_up(settings, client, "before the batches")
    _log(f"{workers} ingest process(es): {BATCH_SIZE}-event batches, {args.senders} senders")
    figures["batches"] = batches(settings, "b", args.batch_seconds, args.senders, meter)
    _caught_up(settings, client, "after the batches")
    return figures


def _one_stack(args: argparse.Namespace, work: Path, workers: int) -> dict[str, Any]:
    """A fresh stack with `workers` ingest processes, its load phases and its check. Each worker
    count gets its own stack: the local broker's work per consumer fetch grows with the log it
    holds in memory, which would handicap the runs that come later on one stack."""
    work.mkdir(parents=True)
    broker, store, isolated = isolated_services(work)
    settings = isolated.model_copy(update={**RAISED_LIMITS, "ingest_workers": workers})
    (work / "tokens").write_text(
        "\n".join(issue_token(settings.user_token_secret, f"bench-user-{i}", 6 * 3600) for i in range(USERS))
    )
    (work / "like.lua").write_text(
        LIKE_SCRIPT.replace("TOKENS", str(work / "tokens"))
        .replace("ACKS", str(work / "acks"))
        .replace("VIDEOS", str(VIDEOS))
    )
    _log(f"{workers} ingest process(es): starting a stack under {work}")
    stack = start_stack(settings, reset=True)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        groups = {
            "ingest": with_children(stack.get("ingest").pid),
            "counter": [stack.get("counter").pid],
            "archiver": [stack.get("archiver").pid],
            "broker": [broker.process.pid],
            "redis": [store.process.pid],
        }
        figures = _phases(args, settings, client, work, CpuMeter(groups))
        _log(f"{workers} ingest process(es): checking the log and the counts against the oracle")
        figures["check"] = _check(settings, client, work, figures)
    finally:
        client.close()
        stack.stop()
        store.stop()
        broker.stop()
    return figures


def _archived(settings: Settings) -> list[Event]:
    table = ds.dataset(settings.raw_dir, format="parquet", partitioning="hive").to_table(
        columns=list(EVENT_COLUMNS)
    )
    return msgspec.convert(table.to_pylist(), type=list[Event])


def _check(settings: Settings, client: redis.Redis, work: Path, run: dict[str, Any]) -> dict[str, Any]:
    """Acknowledged writes against the archived log, and the counter against the oracle over it."""
    events = _archived(settings)
    ids = {e.event_id for e in events}
    acked_likes = set((work / "acks").read_text().split()) if (work / "acks").exists() else set()
    missing_batch_events = sum(
        f"b{n}" not in ids
        for start in run["batches"].pop("acked_starts")
        for n in range(start, start + BATCH_SIZE)
    )
    single_short = 0
    for phase in run["single_paced"]:
        prefix = f"s{phase['offered_rps']:.0f}-"
        single_short += max(0, phase["acknowledged"] - sum(1 for i in ids if i.startswith(prefix)))
    truth = oracle.count(events)
    differing = []
    for video, counts in sorted(truth.items()):
        totals = speed_totals(client, video)
        expected, actual = (counts.views, counts.likes), (totals.get("views", 0), totals.get("likes", 0))
        if expected != actual:
            differing.append({"video": video, "oracle": list(expected), "counted": list(actual)})
    acknowledged = (
        len(acked_likes)
        + sum(p["acknowledged"] for p in run["single_paced"])
        + run["batches"]["batches_acknowledged"] * BATCH_SIZE
    )
    lost = len(acked_likes - ids) + missing_batch_events + single_short
    return {
        "events_archived": len(events),
        "events_acknowledged": acknowledged,
        "archived_but_not_answered": len(events) - acknowledged,
        "acknowledged_likes_missing_from_log": len(acked_likes - ids),
        "acknowledged_batch_events_missing_from_log": missing_batch_events,
        "acknowledged_single_events_missing_from_log": single_short,
        "lost_acknowledged_writes": lost,
        "videos_counted_unlike_oracle": len(differing),
        "examples": differing[:5],
        "likes_counted": sum(c.likes for c in truth.values()),
        "views_counted": sum(c.views for c in truth.values()),
        "ok": lost == 0 and not differing,
    }


def _at(phases: list[dict[str, Any]], rate: float) -> dict[str, Any] | None:
    """The paced phase whose offered rate is nearest `rate`."""
    return min(phases, key=lambda p: abs(p["offered_rps"] - rate), default=None)


def _summary(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    first = runs[min(runs)]
    like, single = _at(first["like_paced"], REFERENCE_RPS), _at(first["single_paced"], REFERENCE_RPS)
    closed = first.get("like_closed")
    best_paced = max((p["rps"] for p in first["like_paced"]), default=0.0)
    per_workers = {
        str(w): {
            "like_requests_per_s": (r.get("like_closed") or {}).get("rps"),
            "like_p99_ms_at_reference": (_at(r["like_paced"], REFERENCE_RPS) or {}).get("p99_ms"),
            "single_event_p99_ms_at_reference": (_at(r["single_paced"], REFERENCE_RPS) or {}).get("p99_ms"),
            "batch_events_per_s": r["batches"]["events_per_s"],
            "lost_acknowledged_writes": r["check"]["lost_acknowledged_writes"],
        }
        for w, r in runs.items()
    }
    summary = {
        "workers_of_headline": min(runs),
        "reference_offered_rps": like["offered_rps"] if like else None,
        "like_p99_ms": like["p99_ms"] if like else None,
        "like_rps_reached": like["rps"] if like else None,
        "like_requests_per_s": closed["rps"] if closed else best_paced,
        "single_event_p99_ms": single["p99_ms"] if single else None,
        "batch_events_per_s": first["batches"]["events_per_s"],
        # CPU of the ingest processes a like (at the reference rate) and a batch event; the broker's
        # a batch event.
        "like_ingest_cpu_us": like["ingest_cpu_us_per_request"] if like else None,
        "batch_ingest_cpu_us_per_event": first["batches"]["ingest_cpu_us_per_event"],
        "broker_cpu_us_per_event": first["batches"]["broker_cpu_us_per_event"],
        "per_workers": per_workers,
        "lost_acknowledged_writes": sum(r["check"]["lost_acknowledged_writes"] for r in runs.values()),
        "ok": all(r["check"]["ok"] for r in runs.values()),
    }
    summary["meets_target"] = bool(
        like
        and like["offered_rps"] >= REFERENCE_RPS
        and like["rps"] >= 0.99 * like["offered_rps"]
        and like["p99_ms"] <= TARGET_P99_MS
        and summary["batch_events_per_s"] >= TARGET_BATCH_EVENTS_PER_S
    )
    return summary


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    runs = {workers: _one_stack(args, work / f"workers-{workers}", workers) for workers in args.workers}
    return {
        "benchmark": "ingest",
        **_summary(runs),
        "runs": {str(w): r for w, r in runs.items()},
        "settings": {
            "seconds_per_phase": args.seconds,
            "batch_seconds": args.batch_seconds,
            "paced_connections": args.connections,
            "users": USERS,
            "videos": VIDEOS,
            "raised_for_the_bench": RAISED_LIMITS,
            "why_raised": "every request comes from 127.0.0.1; both limits are still checked on each request",
        },
        "target": {
            "like_p99_ms_at_most": TARGET_P99_MS,
            "at_offered_rps": REFERENCE_RPS,
            "batch_events_per_s_at_least": TARGET_BATCH_EVENTS_PER_S,
        },
        "machine": _machine(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each wrk phase (default 10)")
    parser.add_argument(
        "--batch-seconds", type=float, default=5.0, help="length of the batch phase (default 5)"
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4], help="ingest processes of each run"
    )
    parser.add_argument("--like-rates", type=float, nargs="+", default=[500.0, 1_000.0, 2_000.0, 3_000.0])
    parser.add_argument("--single-rates", type=float, nargs="+", default=[500.0, 1_000.0, 2_000.0])
    parser.add_argument("--connections", type=int, default=32, help="wrk connections of the paced phases")
    parser.add_argument(
        "--closed-connections",
        type=int,
        default=32,
        help="wrk connections of the closed-loop like phase (0: none)",
    )
    parser.add_argument("--senders", type=int, default=8, help="threads sending batches")
    parser.add_argument(
        "--quick", action="store_true", help="a short run for a test: 2 s phases, 1 and 2 processes"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest.json", help="where to write the JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and logs")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.batch_seconds, args.workers = 2.0, 2.0, [1, 2]
        args.like_rates, args.single_rates, args.closed_connections, args.senders = [200.0], [200.0], 8, 2
    return run_in_work_dir("tally-bench-ingest-", lambda work: bench(args, work), args.out, args.keep, _log)


if __name__ == "__main__":
    sys.exit(0 if main().get("ok") else 1)
