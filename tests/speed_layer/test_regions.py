"""Two regions, each its own Redis and state counter, exchanging the components their counters
publish (decision 0006): delivered in any order, repeated and delayed, they leave both regions'
read keys with the oracle's counts of every event of both, and a repeat or an old component after
that changes nothing."""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec
import pytest
import redis
import redis.asyncio as aioredis

from counting import keys, oracle, rules
from counting.event import REACTION_TYPES, Event
from counting.regions import Component
from counting.settings import Settings
from speed_layer.regions import apply_components
from speed_layer.state_counter import StateCounter
from tests.speed_layer.helpers import Traffic, no_dead_letters, pack, speed_counts

pytestmark = pytest.mark.integration

PARTITIONS = 3
T0 = 1_800_000_000_000


@pytest.fixture
def other_redis(redis_url: str) -> Iterator[str]:
    """A second database of the tests' Redis: the second region's own."""
    url = redis_url.rsplit("/", 1)[0] + "/1"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def _regional(events: list[Event], region: str) -> list[Event]:
    """A region's traffic: its own viewers (geo routing keeps a viewer in one region), no reactions
    (they cross regions as events, not built yet)."""

    def local(value: str | None) -> str | None:
        return f"{region}-{value}" if value is not None else None

    return [
        msgspec.structs.replace(e, user_id=local(e.user_id), session_id=local(e.session_id))
        for e in events
        if e.type not in REACTION_TYPES
    ]


async def _count(settings: Settings, client: aioredis.Redis, events: list[Event]) -> list[Component]:
    published: list[Component] = []

    async def publish(components: list[Component]) -> None:
        published.extend(components)

    worker = StateCounter(settings, client, no_dead_letters, publish=publish)
    await worker.claim(settings.events_topic, list(range(PARTITIONS)))
    records = pack(events, PARTITIONS, topic=settings.events_topic, per_record=3)
    for start in range(0, len(records), 5):
        await worker.handle(records[start : start + 5])
    return published


async def test_two_regions_exchanging_components_serve_the_oracles_counts_of_both(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, other_redis: str
) -> None:
    regions = {
        "eu": (settings.model_copy(update={"topic_partitions": PARTITIONS, "region": "eu"}), aclient),
        "us": (
            settings.model_copy(update={"topic_partitions": PARTITIONS, "region": "us"}),
            aioredis.Redis.from_url(other_redis),
        ),
    }
    sync = {"eu": redis_client, "us": redis.Redis.from_url(other_redis)}
    events = {
        "eu": _regional(Traffic(seed=61, now_ms=T0, step_ms=20).clean(n=700), "eu"),
        "us": _regional(Traffic(seed=62, now_ms=T0, step_ms=20).clean(n=700), "us"),
    }
    everything = events["eu"] + events["us"]
    expected = oracle.count(everything)
    assert sum(c.views for c in expected.values()) and sum(c.repeat_views for c in expected.values())
    published = {name: await _count(s, c, events[name]) for name, (s, c) in regions.items()}
    assert all(published.values())

    rng = random.Random(6)
    for here, there in (("eu", "us"), ("us", "eu")):
        received = published[there] + rng.sample(published[there], len(published[there]) // 3)
        rng.shuffle(received)
        half = len(received) // 2
        settings_here, client_here = regions[here]
        await apply_components(client_here, settings_here, received[half:], T0)  # the rest delayed
        await apply_components(client_here, settings_here, received[:half], T0)
        assert {v: speed_counts(sync[here], v) for v in expected} == expected, here

        await apply_components(client_here, settings_here, rng.sample(received, 40), T0)  # old ones again
        await apply_components(client_here, settings_here, published[here], T0)  # its own: ignored
        assert {v: speed_counts(sync[here], v) for v in expected} == expected, here
        buckets = {rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in everything}
        platform_events = sum(int(sync[here].hget(keys.platform(b), "events") or 0) for b in buckets)
        assert platform_events == len(everything)
    await regions["us"][1].aclose()
    sync["us"].close()
