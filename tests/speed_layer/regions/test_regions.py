"""Two regions, each its own Redis and state counter, exchanging what their counters publish
(decision 0006): components delivered in any order, repeated and delayed, and each region's
reactions applied by the other's counter, leave both regions' read keys with the oracle's counts of
every event of both; a repeat or an old component after that changes nothing."""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec
import pytest
import redis
import redis.asyncio as aioredis

from counting import keys, oracle, rules
from counting.event import REACTION_TYPES, Event
from counting.regions import Component, Exchange
from counting.settings import Settings
from speed_layer.counter.state_counter import StateCounter
from speed_layer.records import Record
from speed_layer.regions.regions import apply_components
from tests.speed_layer.helpers import Traffic, no_dead_letters, pack, speed_counts

pytestmark = pytest.mark.integration

PARTITIONS = 3
T0 = 1_800_000_000_000


@pytest.fixture
def other_redis(redis_url: str) -> Iterator[str]:
    """A second database of the tests' Redis, the one after theirs: the second region's own."""
    server, db = redis_url.rsplit("/", 1)
    url = f"{server}/{int(db) + 1}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def _regional(
    events: list[Event], region: str, reacting: set[str] | None = None, viewing: bool = False
) -> list[Event]:
    """A region's traffic as its ingest API stamps it: its own viewers (geo routing keeps a viewer in
    one region); the users in `reacting` react in every region (a like here, an unlike there), and
    with `viewing` also watch in every region."""

    def local(value: str | None, shared: bool = False) -> str | None:
        return value if value is None or shared else f"{region}-{value}"

    def travels(e: Event) -> bool:
        return e.user_id in (reacting or set()) and (viewing or e.type in REACTION_TYPES)

    return [
        msgspec.structs.replace(
            e, user_id=local(e.user_id, travels(e)), session_id=local(e.session_id), region=region
        )
        for e in events
    ]


def _region(settings: Settings, name: str, peer: str) -> Settings:
    """A region's settings (its peer's broker is never reached here: the test carries the exchange)."""
    update = {
        "topic_partitions": PARTITIONS,
        "region": name,
        "region_peers": f"{peer}=127.0.0.1:9",
    }
    return Settings.model_validate({**settings.model_dump(), **update})


class Region:
    """One region's state counter, and what it published."""

    def __init__(self, settings: Settings, client: aioredis.Redis) -> None:
        self.settings, self.client = settings, client
        self.components: list[Component] = []
        self.reactions: list[Event] = []
        self.worker = StateCounter(settings, client, no_dead_letters, publish=self._publish)
        self.offsets: dict[int, int] = {}

    async def _publish(self, exchange: Exchange) -> None:
        self.components += exchange.components
        self.reactions += exchange.reactions

    async def count(self, events: list[Event]) -> None:
        """The events, as records after those counted before (the events topic of this region)."""
        if not self.worker.owned:
            await self.worker.claim(self.settings.events_topic, list(range(PARTITIONS)))
        records = [
            Record(r.topic, r.partition, r.offset + self.offsets.get(r.partition, 0), r.value)
            for r in pack(events, PARTITIONS, topic=self.settings.events_topic, per_record=3)
        ]
        for r in records:
            self.offsets[r.partition] = max(self.offsets.get(r.partition, 0), r.offset + 1)
        for start in range(0, len(records), 5):
            await self.worker.handle(records[start : start + 5])


async def test_two_regions_exchanging_components_serve_the_oracles_counts_of_both(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, other_redis: str
) -> None:
    regions = {
        "eu": (_region(settings, "eu", "us"), aclient),
        "us": (
            _region(settings, "us", "eu"),
            aioredis.Redis.from_url(other_redis),
        ),
    }
    sync = {"eu": redis_client, "us": redis.Redis.from_url(other_redis)}
    # Travellers watch and react in both regions; in the us hours later (event times spread over
    # 90 minutes: other view windows, so a view of each counts, and each traveller is one viewer).
    travellers = {f"u{n}" for n in range(0, 1_000, 7)}
    later = T0 + 4 * 3_600_000
    events = {
        "eu": _regional(Traffic(seed=61, now_ms=T0, step_ms=20).clean(n=700), "eu", travellers, True),
        "us": _regional(Traffic(seed=62, now_ms=later, step_ms=20).clean(n=700), "us", travellers, True),
    }
    everything = events["eu"] + events["us"]
    expected = oracle.count(everything)
    assert sum(c.views for c in expected.values()) and sum(c.repeat_views for c in expected.values())
    assert sum(c.likes for c in expected.values()) and sum(c.dislikes for c in expected.values())
    viewers = [{e.user_id for e in events[name] if e.type == "view"} for name in ("eu", "us")]
    assert viewers[0] & viewers[1], "some viewers watch in both regions"
    counters = {name: Region(s, c) for name, (s, c) in regions.items()}
    for name, counter in counters.items():
        await counter.count(events[name])
    assert all(c.components and c.reactions for c in counters.values())
    assert all(e.region == name for name, c in counters.items() for e in c.reactions)

    rng = random.Random(6)
    for here, there in (("eu", "us"), ("us", "eu")):
        published = counters[there].components
        received = published + rng.sample(published, len(published) // 3)
        rng.shuffle(received)
        half = len(received) // 2
        settings_here, client_here = regions[here]
        await apply_components(client_here, settings_here, received[half:], T0)  # the rest delayed
        await apply_components(client_here, settings_here, received[:half], T0)
        reactions = counters[there].reactions
        await counters[here].count(reactions + rng.sample(reactions, 20))  # some twice
        assert {v: speed_counts(sync[here], v, uniques="g_uniques") for v in expected} == expected, here

        await apply_components(client_here, settings_here, rng.sample(received, 40), T0)  # old ones again
        await apply_components(client_here, settings_here, counters[here].components, T0)  # its own
        assert {v: speed_counts(sync[here], v, uniques="g_uniques") for v in expected} == expected, here
        buckets = {rules.bucket_of(e.ingest_ts or 0, settings.bucket_ms) for e in everything}
        platform_events = sum(int(sync[here].hget(keys.platform(b), "events") or 0) for b in buckets)
        assert platform_events == len(everything)
    await regions["us"][1].aclose()
    sync["us"].close()
