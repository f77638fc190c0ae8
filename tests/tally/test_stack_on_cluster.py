"""`tally up --redis-cluster`: the whole local stack on a local Redis Cluster, the counter keeping its
state in the worker; traffic through the ingest API is served as the oracle counts it, across a
restart of the counter, and `tally down` stops the cluster too."""

from __future__ import annotations

from pathlib import Path

import pytest

from counting.event import Event
from counting.settings import Settings
from tally.loadgen import post_traffic
from tally.redis_cluster import load_cluster
from tally.stack import load_stack
from tally.traffic_run import generate_items
from tests.tally.test_stack_commands import _served_equals_the_oracle, _stack_settings, _tally

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _send(settings: Settings, seed: int, sent: list[Event]) -> None:
    items = generate_items(events=300, rate=100.0, seed=seed, videos=5, bots=False)
    posted = post_traffic(
        items, f"http://127.0.0.1:{settings.ingest_port}", settings.collector_key, realtime=False
    )
    assert not posted.refused
    sent.extend(posted.events)


def test_the_stack_on_a_local_redis_cluster_serves_the_oracles_counts(tmp_path: Path, redis_url: str) -> None:
    settings = _stack_settings(tmp_path, redis_url)
    try:
        up = _tally(settings, "up", "--reset", "--redis-cluster")
        assert up.exit_code == 0, up.output
        running = load_stack(settings).settings
        assert running.redis_cluster
        cluster = load_cluster(settings)
        assert cluster is not None and running.redis_url == cluster.url
        assert len(cluster.processes) == 3 and all(f"{p.name} " in up.output for p in cluster.processes)

        sent: list[Event] = []
        _send(running, 1, sent)
        _served_equals_the_oracle(running, sent)
        restarted = _tally(settings, "restart", "counter")
        assert restarted.exit_code == 0, restarted.output
        _send(running, 2, sent)  # the new counter restores every partition, then counts on
        _served_equals_the_oracle(running, sent)
    finally:
        down = _tally(settings, "down")
    assert down.exit_code == 0 and "redis-" in down.output, down.output
    assert load_cluster(settings) is None
    assert not any(p.alive() for p in cluster.processes)
