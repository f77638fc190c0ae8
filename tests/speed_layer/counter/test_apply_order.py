"""The counts do not depend on the order the counter applies records in: partitions interleaved at
random, micro-batches of any size, a partition appended out of time order, an earlier copy or
reaction applied later, still give every bucket the oracle's split at every cutoff."""

from __future__ import annotations

import random

import pytest
import redis
import redis.asyncio as aioredis

from counting import keys, oracle, rules, values
from counting.event import Event
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer.counter.handoff import home_of
from speed_layer.records import Record
from tests.speed_layer.helpers import BROWSER, Traffic, no_dead_letters, speed_counts
from tests.writers import new_counter

pytestmark = pytest.mark.integration

T0 = 1_800_000_000_000  # on a bucket edge of the tests' 2 s buckets


def _scatter(events: list[Event], topic: str, partitions: int, rng: random.Random) -> dict[int, list[Record]]:
    """Each event on its video's partition, packed up to four a record; within a partition,
    neighbours are sometimes appended out of ingest order."""
    by_partition: dict[int, list[Event]] = {p: [] for p in range(partitions)}
    for event in sorted(events, key=lambda e: e.ingest_ts or 0):
        by_partition[home_of(event.video_id, partitions)].append(event)
    records: dict[int, list[Record]] = {}
    for partition, mine in by_partition.items():
        for i in range(len(mine) - 1):
            if rng.random() < 0.1:
                mine[i], mine[i + 1] = mine[i + 1], mine[i]
        packed: list[Record] = []
        i = 0
        while i < len(mine):
            size = rng.randint(1, 4)
            packed.append(Record(topic, partition, len(packed), encode_events(mine[i : i + size])))
            i += size
        records[partition] = packed
    return records


def _interleave(records: dict[int, list[Record]], rng: random.Random, reverse: bool) -> list[Record]:
    """One partition after another (highest first), or a random interleaving that keeps each
    partition's offset order."""
    if reverse:
        return [r for p in sorted(records, reverse=True) for r in records[p]]
    queues = {p: list(rs) for p, rs in records.items() if rs}
    out: list[Record] = []
    while queues:
        p = rng.choice(sorted(queues))
        out.append(queues[p].pop(0))
        if not queues[p]:
            del queues[p]
    return out


async def _apply(
    settings: Settings, client: aioredis.Redis, records: list[Record], rng: random.Random
) -> None:
    worker = new_counter(settings, client, no_dead_letters)
    i = 0
    while i < len(records):
        size = rng.randint(1, 9)
        await worker.handle(records[i : i + size])
        i += size


def _assert_every_cutoff(client: redis.Redis, events: list[Event], bucket_ms: int) -> None:
    buckets = sorted({rules.bucket_of(e.ingest_ts or 0, bucket_ms) for e in events})
    for bucket in [*buckets, buckets[-1] + 1]:
        expected = oracle.count(events, cutoff=bucket * bucket_ms)
        actual = {video: speed_counts(client, video, below_bucket=bucket) for video in expected}
        assert actual == expected, f"split at bucket {bucket}"


@pytest.mark.parametrize("seed", range(8))
async def test_any_application_order_gives_the_oracle_at_every_cutoff(
    seed: int, settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    settings = settings.model_copy(update={"topic_partitions": 3})
    rng = random.Random(seed)
    # Few viewers over a few windows (under the replay threshold even counted twice): many window
    # repeats, retries and reaction churn per bucket.
    events = Traffic(seed=seed, now_ms=T0, step_ms=30).clean(videos=4, users=60, n=500)
    assert len({e.event_id for e in events}) < len(events), "retries present"
    scattered = _scatter(events, settings.events_topic, settings.topic_partitions, rng)
    assert len([p for p, records in scattered.items() if records]) > 1
    await _apply(settings, aclient, _interleave(scattered, rng, reverse=seed % 2 == 0), rng)
    _assert_every_cutoff(redis_client, events, settings.bucket_ms)


def _view(event_id: str, ingest_ts: int, user: str = "alice", agent: str | None = BROWSER) -> Event:
    """A view of "viral" at T0; without a user agent it is in the rules' soft band (flagged)."""
    return Event(
        event_id=event_id,
        type="view",
        video_id="viral",
        ts=T0,
        user_id=user,
        session_id="s",
        watch_secs=60.0,
        user_agent=agent,
        ingest_ts=ingest_ts,
    )


def _records(settings: Settings, *events: Event) -> list[Record]:
    """One record an event, in this order, on the partition of the events' video."""
    home = home_of("viral", settings.topic_partitions)
    return [Record(settings.events_topic, home, i, encode_events([e])) for i, e in enumerate(events)]


def _bucket(client: redis.Redis, ingest_ts: int, bucket_ms: int) -> dict[str, int]:
    raw = client.hgetall(keys.bucket_counts("viral", ingest_ts // bucket_ms))
    return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]


async def test_an_earlier_view_applied_later_takes_the_count_and_the_first_bucket(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    first, second = _view("a1", T0 + 500), _view("a2", T0 + 5_500)
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, second, first):
        await worker.handle([record])
    assert _bucket(redis_client, T0 + 500, settings.bucket_ms) == {"views": 1, "uniques": 1}
    assert _bucket(redis_client, T0 + 5_500, settings.bucket_ms) == {
        "views": 0,
        "uniques": 0,
        "repeat_views": 1,
    }
    score = redis_client.zscore(keys.trending((T0 + 5_500) // settings.bucket_ms), "viral")
    assert score is None  # no view of the video counts in that bucket any more


@pytest.mark.parametrize("flagged_first", [True, False])
async def test_the_flag_follows_the_counted_view_of_a_window(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis, flagged_first: bool
) -> None:
    """Of a viewer's two views of a window, one flagged (no user agent: the soft band), the earlier
    counts, applied first or not: its bucket counts it in `flagged` when it is the flagged one, and
    the bucket of the view it replaced no longer does."""
    early = _view("a1", T0 + 500, agent=None if flagged_first else BROWSER)
    late = _view("a2", T0 + 5_500, agent=BROWSER if flagged_first else None)
    assert oracle.count([early, late])["viral"].flagged == (1 if flagged_first else 0)
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, late, early):  # the later first: it counts, then is replaced
        await worker.handle([record])
    flagged = [_bucket(redis_client, t, settings.bucket_ms).get("flagged", 0) for t in (T0 + 500, T0 + 5_500)]
    assert flagged == [1 if flagged_first else 0, 0]
    assert speed_counts(redis_client, "viral") == oracle.count([early, late])["viral"]


async def test_a_copy_ingested_earlier_moves_the_count_to_its_bucket(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    late_copy, early_copy = _view("a1", T0 + 5_500, agent=None), _view("a1", T0 + 500, agent=None)
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, late_copy, early_copy):
        await worker.handle([record])
    assert _bucket(redis_client, T0 + 500, settings.bucket_ms) == {"views": 1, "uniques": 1, "flagged": 1}
    assert _bucket(redis_client, T0 + 5_500, settings.bucket_ms) == {"views": 0, "uniques": 0, "flagged": 0}


async def test_a_like_applied_after_its_unlike_still_counts_in_its_own_bucket(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    def reaction(event_id: str, kind: str, at: int) -> Event:
        return Event(event_id=event_id, type=kind, video_id="viral", ts=at, user_id="bob", ingest_ts=at)

    like, unlike = reaction("r1", "like", T0 + 500), reaction("r2", "unlike", T0 + 5_500)
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, unlike, like):
        await worker.handle([record])
    assert _bucket(redis_client, T0 + 500, settings.bucket_ms).get("likes") == 1
    assert _bucket(redis_client, T0 + 5_500, settings.bucket_ms).get("likes") == -1


@pytest.mark.parametrize("seed", range(6))
async def test_reaction_churn_in_any_order_gives_the_oracle_at_every_cutoff(
    seed: int, settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    # Few users reacting many times each, event times unrelated to ingest times, ingested over a
    # dozen buckets, applied in a random order: every pair's kept reactions span many buckets.
    rng = random.Random(seed)
    kinds = ["like", "unlike", "dislike", "undislike"]
    events = [
        Event(
            event_id=f"r{seed}-{i:03d}",
            type=rng.choice(kinds),  # type: ignore[arg-type]
            video_id="viral",
            ts=T0 - rng.randint(0, 50),  # many ties on ts: the event id decides
            user_id=f"u{rng.randint(0, 2)}",
            ingest_ts=T0 + rng.randint(0, 12 * settings.bucket_ms),
        )
        for i in range(60)
    ]
    shuffled = rng.sample(events, len(events))
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, *shuffled):
        await worker.handle([record])
    _assert_every_cutoff(redis_client, events, settings.bucket_ms)


async def test_a_pairs_kept_reactions_stay_within_the_retention(
    settings: Settings, aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    kinds = ["like", "unlike"]
    events = [
        Event(
            event_id=f"r{i:03d}",
            type=kinds[i % 2],  # type: ignore[arg-type]
            video_id="viral",
            ts=T0 + i,
            user_id="bob",
            ingest_ts=T0 + i * settings.bucket_ms,
        )
        for i in range(101)
    ]
    worker = new_counter(settings, aclient, no_dead_letters)
    for record in _records(settings, *events):
        await worker.handle([record])
    kept = values.decode_history(redis_client.hget(keys.reactions("viral"), "bob"))  # type: ignore[arg-type]
    retention_buckets = settings.retention_ms // settings.bucket_ms
    assert 1 < len(kept) <= retention_buckets + 2
    assert (kept[-1].ts, kept[-1].event_id, kept[-1].state) == (T0 + 100, "r100", rules.LIKED)
    assert speed_counts(redis_client, "viral").likes == oracle.count(events)["viral"].likes == 1
