"""Several regions on one machine (decision 0006): each counts locally, all converge, none waits.

`python -m bench.regions [--regions 3] [--events 600] [--cut-s 8]` starts one local stack per
region (its own broker, redis-server, counter, archiver, replicator and both APIs, on free ports;
one log root shared by all, each region writing its own `region=<name>` part) and posts traffic
into every region (each region's own viewers, on shared videos; some users react in several
regions). It runs the batch once over the union of the logs, at a cutoff every region's watermark
closed, and hands its baseline to every region (what a shared store does in production). Then it
cuts the link between the first two regions (both replicators of the pair stop: each region's
components and reactions stop reaching the other; a TCP proxy cannot stand in for the link, as the
broker hands its own address to clients), posts more traffic everywhere during the cut, restores
the link and waits until every region serves the oracle's counts of all events. Prints one line
of JSON and writes bench/results/regions.json:

- `refused_during_cut`: events any region's ingest API refused during the cut (0 expected);
- `max_divergence`: the largest gap, in views, likes and dislikes summed over the videos, between
  what a region served during the cut and the oracle's counts of every event acknowledged so far;
- `cut_peer_age_ms`: the age of the cut peer's components in the first region's stats answer at
  the end of the cut (`regions` there);
- `converge_s`: from the restored link until every region serves the oracle's counts;
- `lost`, `doubled`: over every region and video, counts below / above the oracle's at the end;
- `batch_cutoff`, `baseline_everywhere`: the batch's cutoff, and whether every region then served
  the oracle's counts as baseline + its buckets from the cutoff on;
- `converged`: every region serves the oracle's views, likes, dislikes and unique viewers;
- `restart_converge_s`, `restart_converged`: then the second region restarts empty (its Redis
  flushed, its counter and replicator stopped, `tally speed rebuild` from its own log, both started
  again: the replicator reads every peer from the start): until it serves the oracle's counts again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds
import redis

from batch_layer.errors import WatermarkUnavailable
from bench.machine import machine
from counting import oracle, redisconn, rules
from counting.event import REACTION_TYPES, Event
from counting.settings import Settings
from speed_layer.counter.rebuild import rebuild
from tally.loadgen import post_traffic
from tally.operations import bring_down, start_one, stop_one
from tally.pipeline import latest_closed_cutoff
from tally.secrets import with_local_secrets
from tally.services import free_port, free_ports
from tally.stack import Stack, start_stack
from tally.traffic_run import generate_items

RESULTS = Path(__file__).parent / "results"
NAMES = ("eu", "us", "ap")
FIELDS = ("views", "likes", "dislikes", "unique_viewers")
VIDEOS = 8
TRAVELLER_EVERY = 4  # one user in four reacts in every region it visits under one name
WAIT_S = 180.0


@dataclass
class Region:
    name: str
    settings: Settings
    stack: Stack | None = None

    @property
    def ingest(self) -> str:
        return f"http://127.0.0.1:{self.settings.ingest_port}"

    @property
    def serving(self) -> str:
        return f"http://127.0.0.1:{self.settings.serving_port}"


def _regions(count: int, root: Path) -> list[Region]:
    names = NAMES[:count]
    brokers = {name: free_port() for name in names}
    found = []
    for name in names:
        peers = ",".join(f"{other}=127.0.0.1:{brokers[other]}" for other in names if other != name)
        settings = Settings(
            data_dir=root / name / "data",
            kafka_bootstrap=f"127.0.0.1:{brokers[name]}",
            redis_url=f"redis://127.0.0.1:{free_port()}/0",
            ingest_port=free_port(),
            serving_port=free_port(),
            faust_web_port=free_ports(2),
            replicator_port=free_port(),
            topic_partitions=2,
            bucket_ms=2_000,
            delivery_timeout_ms=1_000,
            log_root=root / "log",
            region=name,
            region_peers=peers,
        )
        found.append(Region(name, with_local_secrets(settings)))
    return found


def _traffic(region: Region, index: int, phase: int, events: int) -> list[Any]:
    """Generated traffic as the region's own: its viewers, sessions and event ids carry its name,
    but the users of one in TRAVELLER_EVERY keep theirs when they react (in any region)."""
    items = generate_items(events=events, rate=1_000.0, seed=100 * phase + index, videos=VIDEOS, bots=False)
    for item in items:
        event = item.event
        user = event.get("user_id")
        travelling = event["type"] in REACTION_TYPES and user and int(user[1:]) % TRAVELLER_EVERY == 0
        if user and not travelling:
            event["user_id"] = f"{region.name}-{user}"
        if event.get("session_id"):
            event["session_id"] = f"{region.name}-{event['session_id']}"
        event["event_id"] = f"{region.name}-{event['event_id']}"
    return items


def _served(region: Region, videos: list[str]) -> dict[str, tuple[int, ...]]:
    with httpx.Client(base_url=region.serving, timeout=10.0) as client:
        answers = {v: client.get(f"/v1/videos/{v}/stats").json() for v in videos}
    return {v: tuple(int(a[f]) for f in FIELDS) for v, a in answers.items()}


def _expected(sent: list[Event]) -> dict[str, tuple[int, ...]]:
    return {v: (c.views, c.likes, c.dislikes, c.unique_viewers) for v, c in oracle.count(sent).items()}


def _gap(served: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """(counts below the oracle's, counts above it) over views, likes and dislikes."""
    lost = doubled = 0
    for video, want in expected.items():
        have = served.get(video, (0, 0, 0, 0))
        for f in range(3):
            lost += max(0, want[f] - have[f])
            doubled += max(0, have[f] - want[f])
    return lost, doubled


def _wait(done: Callable[[], bool], what: str, timeout: float = WAIT_S) -> float:
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - started


def _all_serve(regions: list[Region], sent: list[Event]) -> bool:
    expected = _expected(sent)
    return all(_served(r, sorted(expected)) == expected for r in regions)


def _post(region: Region, items: list[Any], sent: list[Event]) -> int:
    posted = post_traffic(items, region.ingest, region.settings.collector_key, realtime=False)
    sent.extend(posted.events)
    return len(posted.refused)


def _batch_everywhere(regions: list[Region], sent: list[Event]) -> int:
    """Run the batch once, in the first region, over every region's log, at the first bucket edge
    after the events so far once every region's watermark has closed it; copy its baselines to the
    other regions; wait until each serves it. Returns the cutoff."""
    from batch_layer.job import run_batch  # Spark: only for this step

    first = regions[0].settings
    newest = max(e.ingest_ts or 0 for e in sent)
    cutoff = rules.bucket_start(rules.bucket_of(newest, first.bucket_ms) + 1, first.bucket_ms)
    _wait(lambda: _closed(first, cutoff), f"every region's archiver closing cutoff {cutoff}")
    run_batch(first, cutoff)
    for region in regions[1:]:
        shutil.copytree(first.baselines_dir, region.settings.baselines_dir, dirs_exist_ok=True)
    for region in regions:
        with httpx.Client(base_url=region.serving, timeout=10.0) as client:
            _wait(lambda c=client: _served_cutoff(c, sent[0].video_id) == cutoff, "the baseline served")  # type: ignore[misc]
    return cutoff


def _served_cutoff(client: httpx.Client, video: str) -> int | None:
    return client.get(f"/v1/videos/{video}/stats").json()["batch_cutoff"]  # type: ignore[no-any-return]


def _closed(settings: Settings, cutoff: int) -> bool:
    try:
        return latest_closed_cutoff(settings, cutoff) >= cutoff
    except WatermarkUnavailable:
        return False


def _restart_empty(region: Region, own_events: int) -> None:
    """The region loses its Redis: counter and replicator stop, Redis is emptied once its archiver
    logged all its own events, the speed state is rebuilt from its log, both start again."""
    settings = region.settings
    for name in ("counter", "replicator"):
        stop_one(settings, name)
    logged = f"{region.name}'s archiver logging its events"
    _wait(lambda: _log_rows(settings.own_log_dir) >= own_events, logged)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        client.flushall()
    finally:
        client.close()

    async def rebuilt() -> None:
        client = redisconn.async_client(settings)
        try:
            await rebuild(settings, client)
        finally:
            await client.aclose()

    asyncio.run(rebuilt())
    for name in ("counter", "replicator"):
        start_one(settings, name)


def _log_rows(raw_dir: Path) -> int:
    if not any(raw_dir.rglob("*.parquet")):
        return 0
    return int(ds.dataset(raw_dir, format="parquet", partitioning="hive").count_rows())


def run(count: int, events: int, cut_s: float, root: Path) -> dict[str, Any]:
    regions = _regions(count, root)
    sent: list[Event] = []
    try:
        for region in regions:
            print(f"starting region {region.name}", file=sys.stderr)
            region.stack = start_stack(region.settings, reset=True)
        for i, region in enumerate(regions):
            _post(region, _traffic(region, i, 1, events), sent)
        first_s = _wait(lambda: _all_serve(regions, sent), "every region serving every region's events")
        print(f"converged on {len(sent)} events in {first_s:.1f} s; the batch", file=sys.stderr)
        cutoff = _batch_everywhere(regions, sent)
        baseline_everywhere = _all_serve(regions, sent)
        print(f"baseline at {cutoff} in every region; cutting the link", file=sys.stderr)

        a, b = regions[0], regions[1]
        for region in (a, b):
            stop_one(region.settings, "replicator")
        cut_started = time.monotonic()
        refused = 0
        for i, region in enumerate(regions):
            refused += _post(region, _traffic(region, i, 2, events), sent)
        divergence = 0
        while True:  # sampled until the cut ends, at its end too
            expected = _expected(sent)
            for region in regions:
                lost, doubled = _gap(_served(region, sorted(expected)), expected)
                divergence = max(divergence, lost + doubled)
            if time.monotonic() - cut_started >= cut_s:
                break
            time.sleep(0.5)
        with httpx.Client(base_url=a.serving, timeout=10.0) as client:
            peers = client.get(f"/v1/videos/{sorted(_expected(sent))[0]}/stats").json()["regions"]
        cut_peer_age = peers[b.name]["age_ms"]

        print("restoring the link", file=sys.stderr)
        restored = time.monotonic()
        for region in (a, b):
            start_one(region.settings, "replicator")
        _wait(lambda: _all_serve(regions, sent), "convergence after the cut")
        converge_s = time.monotonic() - restored  # the replicators' restart included

        expected = _expected(sent)
        lost = doubled = 0
        converged = True
        for region in regions:
            served = _served(region, sorted(expected))
            gap = _gap(served, expected)
            lost, doubled = lost + gap[0], doubled + gap[1]
            converged = converged and served == expected

        print(f"restarting region {b.name} empty", file=sys.stderr)
        restarted = time.monotonic()
        _restart_empty(b, sum(1 for e in sent if e.event_id.startswith(f"{b.name}-")))
        restart_converged = True
        try:
            _wait(lambda: _all_serve(regions, sent), "convergence after the empty restart")
        except RuntimeError:
            restart_converged = False
        restart_s = time.monotonic() - restarted
    finally:  # what the stack record holds now (the restarts replaced processes)
        for region in regions:
            if region.stack is not None:
                bring_down(region.settings)
    return {
        "benchmark": "regions",
        "regions": count,
        "events": len(sent),
        "first_converge_s": round(first_s, 2),
        "batch_cutoff": cutoff,
        "baseline_everywhere": baseline_everywhere,
        "cut_s": cut_s,
        "refused_during_cut": refused,
        "max_divergence": divergence,
        "cut_peer_age_ms": cut_peer_age,
        "converge_s": round(converge_s, 2),
        "lost": lost,
        "doubled": doubled,
        "converged": converged,
        "restart_converge_s": round(restart_s, 2),
        "restart_converged": restart_converged,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.regions", description=__doc__)
    parser.add_argument("--regions", type=int, default=3, choices=[2, 3])
    parser.add_argument("--events", type=int, default=600, help="events posted into each region per phase")
    parser.add_argument("--cut-s", type=float, default=8.0, help="how long the link stays cut")
    parser.add_argument("--out", type=Path, default=RESULTS / "regions.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tally-regions-") as tmp:
        result = run(args.regions, args.events, args.cut_s, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
