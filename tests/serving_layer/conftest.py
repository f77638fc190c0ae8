"""Serving-layer fixtures: the API on the test's Redis and data directory, Tally's real writers
(`tests.writers`) to fill them, a maker of stamped events, and the history the tests of merged
answers share (ingested, archived and batched once a session: Spark runs twice in all)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from counting import rules
from counting.event import Event, EventType
from counting.settings import Settings
from serving_layer.app import create_app
from tests.writers import History, Writers, closed_bucket, writers

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36"
SCRIPTED = "python-requests/2.31"  # a scripted client: its views are rejected (scripted_agent)
EVENT_DELAY_MS = 1_000  # event time: a second before ingestion, unless given


@dataclass
class Events:
    """Stamped events as the ingest API would have stamped them: each in a chosen bucket of
    ingestion time (the n-th one made at millisecond n of its bucket, so events of one bucket are
    ingested in the order they were made), with a fresh event id and, for views, a browser and an
    address of its own unless given."""

    bucket_ms: int
    prefix: str = "e"
    _serial: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def _next(self, bucket: int) -> tuple[int, str, int]:
        """A serial number, an event id and an ingestion time in the bucket."""
        n = next(self._serial)
        return n, f"{self.prefix}{n}", bucket * self.bucket_ms + n % self.bucket_ms

    def view(
        self,
        video: str,
        bucket: int,
        user: str | None,
        session: str | None = None,
        watch: float = 95.0,
        ip: str | None = None,
        user_agent: str = BROWSER,
        ts: int | None = None,
    ) -> Event:
        serial, event_id, ingest_ts = self._next(bucket)
        return Event(
            event_id=event_id,
            type="view",
            video_id=video,
            ts=ts if ts is not None else ingest_ts - EVENT_DELAY_MS,
            user_id=user,
            session_id=session or f"s-{user}",
            ip=ip or f"81.{serial >> 16 & 255}.{serial >> 8 & 255}.{serial & 255}",
            user_agent=user_agent,
            watch_secs=watch,
            video_duration_secs=600.0,
            ingest_ts=ingest_ts,
        )

    def views(self, video: str, bucket: int, *users: str, user_agent: str = BROWSER) -> list[Event]:
        """A view of each user, in order."""
        return [self.view(video, bucket, user, user_agent=user_agent) for user in users]

    def reaction(self, kind: EventType, video: str, bucket: int, user: str) -> Event:
        """like, unlike, dislike or undislike, its event time a second before ingestion."""
        _, event_id, ingest_ts = self._next(bucket)
        return Event(
            event_id=event_id,
            type=kind,
            video_id=video,
            ts=ingest_ts - EVENT_DELAY_MS,
            user_id=user,
            ingest_ts=ingest_ts,
        )

    def heartbeat(self, video: str, session: str, ingest_ts: int, kind: EventType = "heartbeat") -> Event:
        """A heartbeat (or, with `kind` "leave", a leave) of a session ingested at `ingest_ts` (ms)."""
        _, event_id, _ = self._next(0)
        return Event(
            event_id=event_id,
            type=kind,
            video_id=video,
            ts=ingest_ts,
            session_id=session,
            ingest_ts=ingest_ts,
        )

    def leave(self, video: str, session: str, ingest_ts: int) -> Event:
        return self.heartbeat(video, session, ingest_ts, "leave")


def _burst(e: Events, video: str, bucket: int, ip: str) -> list[Event]:
    """31 views of new viewers from one address in one minute: the batch, seeing the whole minute,
    rejects every one (address velocity); the speed layer, seeing it fill, lets the first 30 through."""
    minute = bucket * e.bucket_ms // rules.MINUTE_MS * rules.MINUTE_MS
    return [e.view(video, bucket, f"{video}-b{i}", ip=ip, ts=minute + i) for i in range(31)]


def _merged(e: Events, c: int) -> list[Event]:
    """merged, on both sides of the cutoff C: 9 counted views (6 before C), 2 likes (2), 3 dislikes
    (1), 8 unique viewers (6), 4 scripted-agent views rejected (1), 1 short view."""
    return [
        # u0's first view was watched 40 minutes before it reached ingest: its view after the
        # cutoff is in another 30-minute window, so it counts again, and u0 is still one viewer.
        e.view("merged", c - 2, "u0", ts=(c - 2) * e.bucket_ms - 40 * 60_000),
        *e.views("merged", c - 2, "u1", "u2"),
        e.view("merged", c - 2, "u6", watch=10.0),
        e.view("merged", c - 2, "bot1", user_agent=SCRIPTED),
        *e.views("merged", c - 1, "u3", "u4", "u5"),
        e.reaction("like", "merged", c - 1, "u0"),
        e.reaction("like", "merged", c - 1, "u1"),
        e.reaction("like", "merged", c - 1, "u2"),
        e.reaction("dislike", "merged", c - 1, "u3"),
        e.reaction("unlike", "merged", c - 1, "u2"),
        # after the cutoff
        *e.views("merged", c, "u0", "u7"),
        e.reaction("like", "merged", c, "u4"),
        e.view("merged", c + 1, "u8"),
        e.reaction("dislike", "merged", c + 1, "u5"),
        e.reaction("dislike", "merged", c + 1, "u6"),
        e.reaction("unlike", "merged", c + 1, "u1"),  # liked in the baseline, undone after C
        *e.views("merged", c + 1, "bot2", "bot3", "bot4", user_agent=SCRIPTED),
    ]


def _cached(e: Events, c: int) -> list[Event]:
    """cached: 5 views and 3 likes, 3 views and 2 likes of them before C."""
    return [
        *e.views("cached", c - 1, "u0", "u1", "u2"),
        e.reaction("like", "cached", c - 1, "u0"),
        e.reaction("like", "cached", c - 1, "u1"),
        *e.views("cached", c, "u3", "u4"),
        e.reaction("like", "cached", c, "u2"),
    ]


def _burst_after(e: Events, c: int) -> list[Event]:
    """burst: 2 views before C, then a burst (`_burst`) and 1 view in C's bucket: 3 views exactly,
    33 as the speed layer counts them."""
    return [
        *e.views("burst", c - 1, "u0", "u1"),
        *_burst(e, "burst", c, "81.200.0.1"),
        e.view("burst", c, "u2"),
    ]


def _v30(e: Events, c: int) -> list[Event]:
    """v30: 10 views and 1 scripted-agent view before C, then in each of the 30 buckets from C on 2
    views, 1 short view and 1 scripted-agent view."""
    before = [
        *e.views("v30", c - 1, *(f"x{i}" for i in range(10))),
        e.view("v30", c - 1, "bot", user_agent=SCRIPTED),
    ]
    each = [
        event
        for k in range(SPEED_BUCKETS)
        for event in (
            *e.views("v30", c + k, f"y{k}a", f"y{k}b"),
            e.view("v30", c + k, f"y{k}c", watch=10.0),
            e.view("v30", c + k, f"bot{k}", user_agent=SCRIPTED),
        )
    ]
    return [*before, *each]


def _series(e: Events, c: int) -> list[Event]:
    """series, per bucket: C-3: 7 views, 2 scripted-agent views, 1 short view; C-1: 4 views and a
    burst (`_burst`: 0 views and 31 rejected for the batch, 30 views and 1 rejected for the speed
    layer); C: 5 views, 3 scripted-agent views. And other: 3 views in C-1."""
    return [
        *e.views("series", c - 3, *(f"u{i}" for i in range(7))),
        *e.views("series", c - 3, "bot1", "bot2", user_agent=SCRIPTED),
        e.view("series", c - 3, "u7", watch=10.0),
        *e.views("series", c - 1, "u8", "u9", "u10", "u11"),
        *_burst(e, "series", c - 1, "81.200.0.2"),
        *e.views("other", c - 1, "u1", "u2", "u3"),
        *e.views("series", c, "u12", "u13", "u14", "u15", "u16"),
        *e.views("series", c, "bot3", "bot4", "bot5", user_agent=SCRIPTED),
    ]


SPEED_BUCKETS = 30  # buckets of v30 from the cutoff on


@pytest.fixture(scope="session")
def history(tmp_path_factory: pytest.TempPathFactory, redis_url: str, spark: SparkSession) -> History:
    """The stories above around a cutoff C, SPEED_BUCKETS + 2 buckets ago: ingested, archived and
    batched at C (run 0) and one bucket later (run 1), in a data directory and topic of their own."""
    topic = f"history-{uuid.uuid4().hex[:8]}"
    source = Settings(
        data_dir=tmp_path_factory.mktemp("history") / "data",
        bucket_ms=2_000,  # as the tests' `settings`
        redis_url=redis_url,
        events_topic=topic,
        dead_letter_topic=f"{topic}-dlq",
        topic_partitions=2,
        delivery_timeout_ms=1_000,
    )
    c = closed_bucket(source) - SPEED_BUCKETS
    e = Events(source.bucket_ms, prefix="h")
    events = [*_merged(e, c), *_cached(e, c), *_burst_after(e, c), *_v30(e, c), *_series(e, c)]
    cutoffs = [c * source.bucket_ms, (c + 1) * source.bucket_ms]
    return History.build(source, lambda: spark, events, cutoffs)


@pytest.fixture
def tally(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Writers]:
    """Tally's writers on the test's Redis, data directory and topic (Spark started on the first
    batch only)."""
    with writers(settings, spark=lambda: request.getfixturevalue("spark")) as running:
        yield running


@pytest.fixture
def api(settings: Settings, redis_client: redis.Redis, tally: Writers) -> Iterator[TestClient]:
    """The API over a Redis in which a counter runs (its partitions claimed)."""
    tally.start()
    with TestClient(create_app(settings)) as client:
        yield client
