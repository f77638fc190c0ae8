"""`user_liked` reads the reaction values the real writers leave (the counter's sink, the ingest
API's reaction state), and a value of a layout it does not know gives a clear answer, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from counting import keys, oracle, rules
from counting.event import Event
from counting.settings import Settings
from counting.wire import encode_events
from ingest.reactions import ReactionState
from serving_layer.app import create_app
from speed_layer.counter.handoff import home_of
from speed_layer.counter.state_counter import StateCounter
from speed_layer.records import Record
from tests.speed_layer.helpers import no_dead_letters

T0 = 1_795_000_000_000
# (user, reactions in order): each final state, reached through the counter's writer.
STORIES = {
    "liker": ["like"],
    "disliker": ["dislike"],
    "unliker": ["like", "unlike"],
    "switcher": ["like", "dislike"],
    "undisliker": ["dislike", "undislike"],
}


@pytest.fixture
async def aclient(redis_client: redis.Redis, redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _events() -> list[Event]:
    return [
        Event(
            event_id=f"{user}-{i}", type=kind, video_id="clip", ts=T0 + i, user_id=user, ingest_ts=T0 + 10 * i
        )  # type: ignore[arg-type]
        for user, kinds in STORIES.items()
        for i, kind in enumerate(kinds)
    ]


def _answers(settings: Settings) -> dict[str, tuple[bool | None, bool | None, list[str]]]:
    with TestClient(create_app(settings)) as api:
        bodies = {
            u: api.get("/v1/videos/clip/stats", params={"user_id": u}).json() for u in [*STORIES, "nobody"]
        }
    return {u: (b["user_liked"], b["user_disliked"], b["degraded"]) for u, b in bodies.items()}


def _expected(events: list[Event]) -> dict[str, tuple[bool | None, bool | None, list[str]]]:
    states = oracle.reactions(events)
    return {
        u: (states.get((u, "clip")) == rules.LIKED, states.get((u, "clip")) == rules.DISLIKED, [])
        for u in [*STORIES, "nobody"]
    }


def _record(settings: Settings, events: list[Event]) -> Record:
    """The events in one record of the video's partition, as the ingest API routes them."""
    return Record(settings.events_topic, home_of("clip", settings.topic_partitions), 0, encode_events(events))


async def _counter(settings: Settings, client: aioredis.Redis) -> StateCounter:
    """The counter as a running worker is after its partitions were assigned."""
    worker = StateCounter(settings, client, no_dead_letters)
    await worker.claim(settings.events_topic, list(range(settings.topic_partitions)))
    return worker


async def test_user_liked_reads_what_the_counter_wrote(settings: Settings, aclient: aioredis.Redis) -> None:
    events = _events()
    worker = await _counter(settings, aclient)
    await worker.handle([_record(settings, events)])
    assert _answers(settings) == _expected(events)


async def test_user_liked_reads_what_the_ingest_api_recorded(
    settings: Settings, aclient: aioredis.Redis
) -> None:
    events = _events()
    await ReactionState(aclient).apply(events)
    await _counter(settings, aclient)  # running, it has not counted them yet
    assert _answers(settings) == _expected(events)


async def test_user_liked_after_redis_lost_the_speed_state_says_so(
    settings: Settings, aclient: aioredis.Redis
) -> None:
    await ReactionState(aclient).apply(_events()[:1])  # the ingest API recorded a like; no counter ran
    [(liked, _, degraded)] = [a for u, a in _answers(settings).items() if u == "liker"]
    assert liked is True
    assert any("user reactions may be out of date" in reason for reason in degraded), degraded


async def test_a_reaction_value_of_an_unknown_layout_answers_clearly(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    events = _events()
    await (await _counter(settings, aclient)).handle([_record(settings, events)])
    # What a future Tally might write: no writer of this version makes it, so it is typed here.
    redis_client.hset(keys.reactions("clip"), "liker", b"\xc1future")
    with TestClient(create_app(settings)) as api:
        answer = api.get("/v1/videos/clip/stats", params={"user_id": "liker"})
        other = api.get("/v1/videos/clip/stats", params={"user_id": "disliker"})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["user_liked"], body["user_disliked"], body["approx"]) == (None, None, True)
    assert any("not in the layout this Tally reads" in reason for reason in body["degraded"]), body
    assert other.json()["user_disliked"] is True
