"""Two processes of every part on the real local stack (`tally up --counters 2 --archivers 2
--ingest-workers 2 --serving-workers 2`): the consumer groups share the partitions, both of each
kind do work, the served counts and the batch equal the oracle, and a publish reaches every serving
process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from counting import oracle
from counting.event import Event
from counting.settings import Settings
from speed_layer.worker import metrics_port
from tally.loadgen import post_traffic
from tally.services import free_port, free_ports
from tally.speedview import counter_caught_up, wait_until, watermark
from tally.stack import Stack, kind_and_instance, start_stack
from tally.traffic_run import generate_items
from warehouse.baseline import current_baseline

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TWO = 2


@pytest.fixture
def two_of_each(settings: Settings, broker: str, redis_client: redis.Redis) -> Iterator[Stack]:
    scaled = settings.model_copy(
        update={
            "kafka_bootstrap": broker,
            "ingest_port": free_port(),
            "serving_port": free_port(),
            "faust_web_port": free_ports(2 * TWO),
            "topic_partitions": 4,
            "counters": TWO,
            "archivers": TWO,
            "ingest_workers": TWO,
            "serving_workers": TWO,
        }
    )
    running = start_stack(scaled, reset=True)
    yield running
    running.stop()


def _children(pid: int) -> set[int]:
    """The worker processes a uvicorn supervisor `pid` started (multiprocessing's spawned children;
    not its resource tracker)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    children = {int(child) for child in text.split()}
    return {c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()}


def _events_counted(settings: Settings, name: str) -> float:
    """What one speed-layer process's /metrics says it decoded (tally_speed_events_total)."""
    kind, instance = kind_and_instance(name)
    body = httpx.get(f"http://127.0.0.1:{metrics_port(settings, kind, instance)}/metrics", timeout=5).text
    prefix = f'tally_speed_events_total{{worker="{kind}"}} '
    return sum(float(line.removeprefix(prefix)) for line in body.splitlines() if line.startswith(prefix))


def _served(settings: Settings, videos: list[str]) -> dict[str, tuple[int, int, int, int]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.serving_port}", timeout=10) as api:
        answers = {v: api.get(f"/v1/videos/{v}/stats").json() for v in videos}
    return {v: (a["views"], a["likes"], a["dislikes"], a["unique_viewers"]) for v, a in answers.items()}


def _expected(events: list[Event], cutoff: int | None = None) -> dict[str, tuple[int, int, int, int]]:
    return {
        v: (c.views, c.likes, c.dislikes, c.unique_viewers) for v, c in oracle.count(events, cutoff).items()
    }


def _ready_by_process(settings: Settings, want: int, timeout: float = 30.0) -> dict[int, dict[str, object]]:
    """`/readyz` on new connections until `want` different serving processes answered (the kernel
    hands each new connection to one of the processes sharing the port)."""
    seen: dict[int, dict[str, object]] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        answer = httpx.get(f"http://127.0.0.1:{settings.serving_port}/readyz", timeout=5).json()
        seen[int(answer["process"])] = answer
    return seen


def test_two_of_each_part_count_what_the_oracle_counts(two_of_each: Stack, redis_client: redis.Redis) -> None:
    stack = two_of_each
    settings = stack.settings
    names = {p.name for p in stack.processes}
    assert {"counter", "counter-2", "archiver", "archiver-2", "ingest", "serving"} <= names
    for api in ("ingest", "serving"):
        assert len(_children(stack.get(api).pid)) == TWO, f"the {api} API must run {TWO} worker processes"

    items = generate_items(events=3_000, rate=1_000.0, seed=7, videos=25, bots=True)
    sent = post_traffic(
        items, f"http://127.0.0.1:{settings.ingest_port}", settings.collector_key, batch_size=50
    )
    assert not sent.refused
    assert set(sent.labels) > {"human"}, "the traffic must carry bots"
    wait_until(
        lambda: counter_caught_up(redis_client, settings), 90, "the counters reaching the end of the log"
    )

    expected = _expected(sent.events)
    assert _served(settings, sorted(expected)) == expected

    cutoff = (max(e.ingest_ts or 0 for e in sent.events) // settings.bucket_ms + 1) * settings.bucket_ms
    wait_until(lambda: watermark(redis_client) >= cutoff, 90, f"the archivers closing cutoff {cutoff}")
    for name in ("counter", "counter-2", "archiver", "archiver-2"):
        assert _events_counted(settings, name) > 0, f"{name} got no partition or handled nothing"
    from batch_layer import run_batch

    run_batch(settings, cutoff)
    baseline = current_baseline(settings.baselines_dir)
    assert baseline is not None and baseline.cutoff == cutoff
    assert {
        v: (r.views, r.likes, r.dislikes, r.unique_viewers) for v, r in baseline.rows.items()
    } == _expected(sent.events, cutoff)

    ready = _ready_by_process(settings, TWO)
    assert set(ready) == _children(stack.get("serving").pid), "both serving processes must answer"
    assert {answer["baseline_run_id"] for answer in ready.values()} == {baseline.run_id}
    assert _served(settings, sorted(expected)) == expected
