"""Two regions on this machine, each its own broker, Redis database, counter and replicator processes
(decision 0006): every region serves the oracle's counts of both regions' events (views by
components, reactions applied by each region's counter); while one
replicator is stopped (the link is cut) its region keeps counting its own events and lags on the
other's, and once it runs again it catches up from where it stopped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from counting import keys, oracle
from counting.event import Event
from counting.settings import Settings
from tally.services import free_port, start_broker
from tally.topics import ensure_topics
from tests.speed_layer.helpers import Traffic, produce_events, speed_counts, wait_until
from tests.speed_layer.test_crash import StartWorker
from tests.speed_layer.test_regions import _regional

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1_800_000_000_000


@pytest.fixture
def second_broker(tmp_path: Path) -> Iterator[str]:
    service = start_broker(free_port(), tmp_path / "broker-us")
    yield f"127.0.0.1:{service.port}"
    service.stop()


@pytest.fixture
def us_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/1")
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def _served_everywhere(clients: dict[str, redis.Redis], events: list[Event]) -> dict[str, bool]:
    expected = oracle.count(events)
    return {name: {v: speed_counts(c, v) for v in expected} == expected for name, c in clients.items()}


def test_two_regions_each_serve_both_regions_counts_and_catch_up_after_a_cut(
    settings: Settings,
    broker: str,
    second_broker: str,
    redis_client: redis.Redis,
    us_redis: redis.Redis,
    start_worker: StartWorker,
) -> None:
    common = {"topic_partitions": 2, "counter_state": "worker", "counter_flush_ms": 50}
    eu = settings.model_copy(
        update={
            **common,
            "region": "eu",
            "kafka_bootstrap": broker,
            "components_topic": f"components-{settings.events_topic}",
            "region_peers": f"us={second_broker}",
            "faust_web_port": free_port(),
            "replicator_port": free_port(),
        }
    )
    us = eu.model_copy(
        update={
            "region": "us",
            "kafka_bootstrap": second_broker,
            "redis_url": eu.redis_url.rsplit("/", 1)[0] + "/1",
            "region_peers": f"eu={broker}",
            "faust_web_port": free_port(),
            "replicator_port": free_port(),
        }
    )
    clients = {"eu": redis_client, "us": us_redis}
    regions = {"eu": eu, "us": us}
    traffic = {
        "eu": Traffic(seed=71, now_ms=T0, step_ms=20),
        "us": Traffic(seed=72, now_ms=T0, step_ms=20),
    }
    sent: list[Event] = []

    travellers = {f"u{n}" for n in range(0, 1_000, 5)}  # they react in both regions

    def send(region: str, n: int) -> None:
        events = _regional(traffic[region].clean(n=n), region, travellers)
        produce_events(regions[region].kafka_bootstrap, regions[region], events, per_record=3)
        sent.extend(events)

    replicators = {}
    for name, region in regions.items():
        ensure_topics(region)
        start_worker("counter", region)
        replicators[name] = start_worker("replicator", region)
    send("eu", 500)
    send("us", 500)
    wait_until(lambda: all(_served_everywhere(clients, sent).values()), 90, "both regions serving both")
    for name, peer in (("eu", "us"), ("us", "eu")):
        status = json.loads(clients[name].hget(keys.region_peers(), peer) or b"{}")
        assert status["in_sync_at"] > 0 and status["error"] is None, (name, status)

    assert replicators["us"].stop() == 0  # the link from eu to us is cut
    send("eu", 300)
    send("us", 300)
    wait_until(lambda: _served_everywhere(clients, sent)["eu"], 90, "eu serving both during the cut")
    assert not _served_everywhere(clients, sent)["us"]  # us counted its own, not eu's new events
    replicators["us"] = start_worker("replicator", us)  # the link is back
    wait_until(lambda: all(_served_everywhere(clients, sent).values()), 90, "us catching up after the cut")
