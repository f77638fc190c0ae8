"""`GET /v1/videos/{id}/timeseries?step=1m|1h`: the batch's history tier before the cutoff, the speed
buckets after it (summed into steps, or as they are when a step is finer than a bucket), within each
tier's retention, against the oracle."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from counting import oracle, rules
from counting.event import Event
from counting.settings import Settings
from serving_layer.app import create_app
from tests.serving_layer.conftest import SCRIPTED, Events
from tests.writers import History, Writers, writers

pytestmark = pytest.mark.integration

MIN = rules.MINUTE_MS
HOUR = rules.HOUR_MS
Counts = tuple[int, int, int]
ZERO: Counts = (0, 0, 0)
Point = tuple[int, int, str, int, int, int]


def _source(tmp: pytest.TempPathFactory, redis_url: str, bucket_ms: int) -> Settings:
    topic = f"tiers-{uuid.uuid4().hex[:8]}"
    return Settings(
        data_dir=tmp.mktemp("tiers") / "data",
        bucket_ms=bucket_ms,
        redis_url=redis_url,
        events_topic=topic,
        dead_letter_topic=f"{topic}-dlq",
        topic_partitions=2,
        delivery_timeout_ms=1_000,
    )


def _burst(e: Events, video: str, half_minute: int, ip: str) -> list[Event]:
    """31 views of new viewers from one address in one minute: the batch rejects every one (address
    velocity), the speed layer, seeing it fill, lets the first 30 through."""
    minute = half_minute * e.bucket_ms // MIN * MIN
    return [e.view(video, half_minute, f"{video}-b{i}", ip=ip, ts=minute + i) for i in range(31)]


@pytest.fixture(scope="module")
def minutes(tmp_path_factory: pytest.TempPathFactory, redis_url: str, spark: SparkSession) -> History:
    """2 s buckets (the tests' `settings`), the cutoff C in the middle of minute c (so the minute
    and the hour holding it are made of batch and speed counts). Video `t`, per minute: c-178: 2
    views, 1 scripted; c-119: 1 view, 1 short; c-3: 3 views, 1 scripted, 1 short; c-2: 2 views and a
    burst; c-1: none; c before C: 2 views; c from C: 2 views, 1 scripted; c+1: 3 views, 1 short.
    Video `other`: 2 views in minute c before C. Batched at C."""
    source = _source(tmp_path_factory, redis_url, 2_000)
    c = time.time_ns() // 1_000_000 // MIN - 2
    e = Events(MIN // 2, prefix="m")  # each event in a chosen half-minute of ingestion time

    def half(minute: int, second_half: bool = False) -> int:
        return 2 * minute + second_half

    events = [
        *e.views("t", half(c - 178), "a0", "a1"),
        e.view("t", half(c - 178), "bot0", user_agent=SCRIPTED),
        e.view("t", half(c - 119), "a2"),
        e.view("t", half(c - 119), "a3", watch=10.0),
        *e.views("t", half(c - 3), "u0", "u1", "u2"),
        e.view("t", half(c - 3), "bot1", user_agent=SCRIPTED),
        e.view("t", half(c - 3), "u3", watch=10.0),
        *e.views("t", half(c - 2), "u4", "u5"),
        *_burst(e, "t", half(c - 2), "81.200.0.3"),
        *e.views("t", half(c), "u6", "u7"),
        *e.views("other", half(c), "o0", "o1"),
        *e.views("t", half(c, second_half=True), "u8", "u9"),
        e.view("t", half(c, second_half=True), "bot2", user_agent=SCRIPTED),
        *e.views("t", half(c + 1), "u10", "u11", "u12"),
        e.view("t", half(c + 1), "u13", watch=10.0),
    ]
    return History.build(source, lambda: spark, events, [half(c, second_half=True) * e.bucket_ms])


@pytest.fixture(scope="module")
def hourly(tmp_path_factory: pytest.TempPathFactory, redis_url: str, spark: SparkSession) -> History:
    """1-hour buckets (production's), the cutoff C on the last closed hour edge. Video `t`: per
    minute before C: c-50: 2 views, 1 scripted; c-2: 1 short; c-1: 1 view; in the bucket from C: 3
    views, 1 scripted. Batched at C."""
    source = _source(tmp_path_factory, redis_url, HOUR)
    cutoff = (time.time_ns() // 1_000_000 - 6_000) // HOUR * HOUR
    c = cutoff // MIN
    e = Events(MIN, prefix="h")  # each event in a chosen minute, within its first 100 ms
    events = [
        *e.views("t", c - 50, "a0", "a1"),
        e.view("t", c - 50, "bot0", user_agent=SCRIPTED),
        e.view("t", c - 2, "a2", watch=10.0),
        e.view("t", c - 1, "a3"),
        *e.views("t", c, "u0", "u1", "u2"),
        e.view("t", c, "bot1", user_agent=SCRIPTED),
    ]
    return History.build(source, lambda: spark, events, [cutoff])


def _oracle_steps(
    events: list[Event], video: str, width_ms: int, cutoff: int | None = None, since: int = 0
) -> dict[int, Counts]:
    """Per start of `width_ms` of ingestion time: the counted views (`oracle.counted_views`),
    rejected and short views (`oracle.view_outcomes`) of `video` the oracle finds among the events
    ingested before `cutoff`, of those ingested from `since` on."""

    def start(event: Event) -> int:
        return (event.ingest_ts or 0) // width_ms * width_ms

    def kept(event: Event) -> bool:
        return event.video_id == video and (event.ingest_ts or 0) >= since

    views = Counter(start(e) for e in oracle.counted_views(events, cutoff) if kept(e))
    outcomes = [(e, o) for e, o, _ in oracle.view_outcomes(oracle.dedup(events, cutoff)) if kept(e)]
    rejected = Counter(start(e) for e, o in outcomes if o == oracle.REJECTED)
    short = Counter(start(e) for e, o in outcomes if o == oracle.SHORT)
    return {s: (views[s], rejected[s], short[s]) for s in {start(e) for e, _ in outcomes}}


def _lambda(events: list[Event], video: str, width_ms: int, cutoff: int) -> Callable[[int], Counts]:
    """The oracle's counts of the point of `width_ms` at a start: of the events ingested before the
    cutoff as the batch judges them (the events before it), plus of those ingested from it on as
    judged with every event (what the speed layer counts on clean traffic)."""
    before = _oracle_steps(events, video, width_ms, cutoff=cutoff)
    after = _oracle_steps(events, video, width_ms, since=cutoff)

    def counts(start: int) -> Counts:
        b, a = before.get(start, ZERO), after.get(start, ZERO)
        return (b[0] + a[0], b[1] + a[1], b[2] + a[2])

    return counts


def _points(api: TestClient, video: str, **params: int | str) -> list[Point]:
    answer = api.get(f"/v1/videos/{video}/timeseries", params=params)
    assert answer.status_code == 200, answer.text
    return [
        (p["start_ms"], p["width_ms"], p["source"], p["views"], p["rejected"], p["short_views"])
        for p in answer.json()["points"]
    ]


def test_minute_points_are_the_batch_tier_before_the_cutoff_and_summed_speed_buckets_after(
    api: TestClient, settings: Settings, tally: Writers, minutes: History
) -> None:
    minutes.count(tally)
    run = minutes.runs[0]
    cutoff = run.cutoff
    c = cutoff // MIN * MIN
    window = {"step": "1m", "start": c - 3 * MIN, "end": c + 2 * MIN}

    before_publish = _points(api, "t", **window)
    assert {p[2] for p in before_publish} == {"speed"}
    assert before_publish[1] == (c - 2 * MIN, MIN, "speed", 32, 1, 0)  # the speed layer let 30 through

    minutes.publish(settings, run)
    got = _points(api, "t", **window)

    counts = _lambda(minutes.events, "t", MIN, cutoff)
    want = [
        (s, MIN, "batch" if s + MIN <= cutoff else "speed", *counts(s))
        for s in range(c - 3 * MIN, c + 2 * MIN, MIN)
    ]
    assert got == want
    assert [p[2:] for p in got] == [
        ("batch", 3, 1, 1),
        ("batch", 2, 31, 0),  # the batch refused the whole burst
        ("batch", 0, 0, 0),
        ("speed", 4, 1, 0),  # 2 views before the cutoff (batch), 2 and a scripted one after (speed)
        ("speed", 3, 0, 1),
    ]
    assert _points(api, "other", **window)[3][2:] == ("speed", 2, 0, 0)


def test_hour_points_span_the_hours_before_the_cutoff_and_the_hour_holding_it(
    api: TestClient, settings: Settings, tally: Writers, minutes: History
) -> None:
    minutes.count(tally)
    run = minutes.runs[0]
    minutes.publish(settings, run)
    first = min(e.ingest_ts or 0 for e in minutes.events) // HOUR * HOUR
    last = run.cutoff // HOUR * HOUR
    # Through the hour of the newest event: minute c + 1 lies in the next hour when c is minute 59.
    end = max(e.ingest_ts or 0 for e in minutes.events) // HOUR * HOUR + HOUR

    got = _points(api, "t", step="1h", start=first, end=end)

    counts = _lambda(minutes.events, "t", HOUR, run.cutoff)
    want = [(s, HOUR, "batch" if s < last else "speed", *counts(s)) for s in range(first, end, HOUR)]
    assert got == want
    assert sum(p[3] for p in got) == 15


def test_minute_points_finer_than_the_buckets_after_the_cutoff_are_whole_buckets(
    settings: Settings, redis_client: redis.Redis, hourly: History
) -> None:
    hourly_settings = settings.model_copy(update={"bucket_ms": HOUR})
    run = hourly.runs[0]
    cutoff = run.cutoff
    with writers(hourly_settings) as tally, TestClient(create_app(hourly_settings)) as api:
        tally.start()
        hourly.count(tally)
        hourly.publish(hourly_settings, run)

        got = _points(api, "t", step="1m", start=cutoff - 60 * MIN, end=cutoff + 5 * MIN)

    before = _lambda(hourly.events, "t", MIN, cutoff)
    after = _lambda(hourly.events, "t", HOUR, cutoff)
    want = [(s, MIN, "batch", *before(s)) for s in range(cutoff - 60 * MIN, cutoff, MIN)]
    assert got == [*want, (cutoff, HOUR, "speed", *after(cutoff))]
    assert got[-1] == (cutoff, HOUR, "speed", 3, 1, 0)  # one hour, never mistaken for a minute
    assert sum(p[3] for p in got[:-1]) == 3


def test_points_older_than_the_tier_retention_are_not_answered(
    settings: Settings, redis_client: redis.Redis, tally: Writers, minutes: History
) -> None:
    short = settings.model_copy(update={"history_minute_retention_ms": 60 * MIN})
    minutes.count(tally)
    run = minutes.runs[0]
    minutes.publish(short, run)
    c = run.cutoff // MIN * MIN
    with TestClient(create_app(short)) as api:
        refused = api.get(
            "/v1/videos/t/timeseries", params={"step": "1m", "start": c - 119 * MIN, "buckets": 10}
        )
        asked = int(time.time() * 1000)
        answer = api.get(
            "/v1/videos/t/timeseries", params={"step": "1m", "start": c - 70 * MIN, "end": c + MIN}
        )
        hours = _points(api, "t", step="1h", start=c - 178 * MIN, buckets=1)

    assert refused.status_code == 422
    error = refused.json()["errors"][0]
    assert error["field"] == "start"
    assert "TALLY_HISTORY_MINUTE_RETENTION_MS" in error["reason"]
    body = answer.json()
    oldest = body["oldest_ms"]
    assert asked - 60 * MIN <= oldest < asked - 60 * MIN + 2 * MIN
    assert (body["step_ms"], body["retention_ms"]) == (MIN, 60 * MIN)
    assert [p["start_ms"] for p in body["points"]] == list(range(oldest, c + MIN, MIN))
    hour = (c - 178 * MIN) // HOUR * HOUR
    assert hours == [(hour, HOUR, "batch", *_lambda(minutes.events, "t", HOUR, run.cutoff)(hour))]


def test_a_bad_step_is_refused_naming_it(api: TestClient) -> None:
    answer = api.get("/v1/videos/t/timeseries", params={"step": "5m"})
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "step"
