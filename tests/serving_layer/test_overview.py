"""The platform overview route on a real Redis filled by Tally's real writers, against the oracle:
rates, per-bucket series and bot share, the top and rising videos, the counter's lag on a real
broker, the served batch run's freshness, and the answers to a bad window or a store away."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from counting import oracle, rules, trends
from counting.event import Event
from counting.settings import Settings
from counting.traffic import TrafficConfig
from serving_layer.app import create_app
from speed_layer.records import Record
from tally.services import free_port
from tally.topics import ensure_topics
from tests.batch_layer.test_batch_payouts import traffic_events
from tests.serving_layer.conftest import SCRIPTED, Events
from tests.writers import History, Writers, closed_bucket, writers
from warehouse.baseline import read_pointer

pytestmark = pytest.mark.integration

TRAFFIC_START_S = 120  # the generated traffic starts this long ago and lasts 60 s (3,000 events at 50/s)


def _traffic() -> list[Event]:
    """The platform-counts traffic (tests/speed_layer/counter/test_platform_counts.py): a fifth of it from
    bots, retries and late sessions; the speed layer and the oracle agree on it exactly."""
    start = time.time_ns() // 1_000_000 - TRAFFIC_START_S * 1_000
    config = TrafficConfig(
        seed=3, videos=12, viewers=200, events=3_000, rate=50.0, bot_fraction=0.2, start_ms=start
    )
    return traffic_events(config)


def _oracle_buckets(events: Sequence[Event], bucket_ms: int) -> dict[int, Counter[str]]:
    """Per bucket of ingestion time, what the oracle says the platform's bucket holds: the events
    consumed (every copy), the views counted and the views refused by reason."""
    per: dict[int, Counter[str]] = defaultdict(Counter)
    for event in events:
        per[rules.bucket_of(event.ingest_ts or 0, bucket_ms)]["events"] += 1
    for judged in oracle.judged_views(oracle.dedup(events)):
        bucket = rules.bucket_of(judged.event.ingest_ts or 0, bucket_ms)
        if judged.outcome == oracle.COUNTED:
            per[bucket]["views"] += 1
        elif judged.outcome == oracle.REJECTED:
            per[bucket][f"rejected:{judged.reason}"] += 1
    return per


def _check_against_oracle(answer: dict[str, Any], events: Sequence[Event], bucket_ms: int) -> None:
    """The answer is what the oracle counts over the window its `as_of` and `window_buckets` give."""
    as_of, window = answer["as_of"], answer["window_buckets"]
    first, last, base_first, base_last = trends.windows(
        as_of, bucket_ms, window, trends.DEFAULT_BASELINE_BUCKETS
    )
    per = _oracle_buckets(events, bucket_ms)
    expected_points = [
        {
            "start_ms": b * bucket_ms,
            "events": per[b]["events"],
            "views": per[b]["views"],
            "rejected": sum(n for name, n in per[b].items() if name.startswith("rejected:")),
        }
        for b in range(first, last + 1)
    ]
    assert answer["points"] == expected_points
    window_totals: Counter[str] = sum((per[b] for b in range(first, last + 1)), Counter())
    secs = (as_of - first * bucket_ms + 1) / 1000
    assert (answer["from_ms"], answer["window_secs"]) == (first * bucket_ms, secs)
    assert (answer["events"], answer["views"]) == (window_totals["events"], window_totals["views"])
    assert answer["events_per_sec"] == window_totals["events"] / secs
    assert answer["views_per_sec"] == window_totals["views"] / secs

    refused = {name[9:]: n for name, n in window_totals.items() if name.startswith("rejected:")}
    judged = window_totals["views"] + sum(refused.values())
    assert answer["bot_share"] == {
        "judged_views": judged,
        "rejected_views": sum(refused.values()),
        "share": sum(refused.values()) / judged,
        "by_reason": [  # most refused first
            {"reason": reason, "views": n, "share": n / judged}
            for reason, n in sorted(refused.items(), key=lambda item: (-item[1], item[0]))
        ],
    }

    per_video = trends.bucket_views(events, bucket_ms)
    recent = trends.window_views(per_video, first, last)
    ranked = trends.ranking(recent)[:10]
    # Ties at the list's end may keep either video: the views in order, each video's its own.
    assert [v["window_views"] for v in answer["top"]] == [n for _, n in ranked]
    assert all(recent[v["video_id"]] == v["window_views"] for v in answer["top"])
    # Without a batch, a top video's total is every view the speed layer counted, in the window or not.
    totals = oracle.count(events)
    assert all(v["views"] == totals[v["video_id"]].views for v in answer["top"])
    before = trends.window_views(per_video, base_first, base_last)
    rising = trends.velocities(recent, before, as_of, bucket_ms, window, trends.DEFAULT_BASELINE_BUCKETS)[:10]
    assert answer["rising"] == [
        {
            "video_id": v.video_id,
            "views": v.recent_views,
            "views_per_minute": v.views_per_minute,
            "baseline_per_minute": v.baseline_per_minute,
            "rise": v.rise,
        }
        for v in rising
    ]


def test_the_overview_counts_what_the_oracle_counts(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    events = _traffic()
    half = len(events) // 2
    tally.ingest(events[:half])
    tally.count()
    tally.ingest(events[half:])
    tally.count()

    whole = (TRAFFIC_START_S + 10) * 1_000 // settings.bucket_ms  # the traffic and 10 s before it
    answer = api.get("/v1/overview", params={"window_buckets": whole}).json()

    truth = oracle.count(events).values()
    assert answer["views"] == sum(c.views for c in truth) > 0
    assert answer["events"] == len(events)
    rejected: Counter[str] = sum((Counter(c.rejected) for c in truth), Counter())
    assert {row["reason"]: row["views"] for row in answer["bot_share"]["by_reason"]} == rejected
    assert len(rejected) > 1
    _check_against_oracle(answer, events, settings.bucket_ms)

    # A window starting halfway through the traffic, its baseline buckets on the first half: the
    # rising videos are weighed against a past of their own.
    split = (TRAFFIC_START_S - 30) * 1_000 // settings.bucket_ms
    answer = api.get("/v1/overview", params={"window_buckets": split}).json()
    _check_against_oracle(answer, events, settings.bucket_ms)
    assert 0 < answer["events"] < len(events)
    assert any(v["baseline_per_minute"] > 0 for v in answer["rising"])
    assert any(v["window_views"] < v["views"] for v in answer["top"])


def test_an_idle_platform_is_zero(api: TestClient, settings: Settings) -> None:
    answer = api.get("/v1/overview").json()

    assert answer["window_buckets"] == 6
    assert (answer["events"], answer["views"], answer["events_per_sec"], answer["views_per_sec"]) == (
        0,
        0,
        0,
        0,
    )
    assert [p["events"] for p in answer["points"]] == [0] * 6
    assert answer["bot_share"] == {"judged_views": 0, "rejected_views": 0, "share": None, "by_reason": []}
    assert (answer["top"], answer["rising"], answer["batch"]) == ([], [], None)
    window = {
        "source": "speed",
        "window_buckets": 6,
        "text": "speed layer, last 6 buckets of 2 s: counted as the events came, before a batch "
        "corrects them; not totals",
    }
    scopes = answer["scopes"]
    assert (scopes["counts"], scopes["bot_share"], scopes["rising"]) == (window, window, window)
    assert (scopes["top"]["source"], scopes["top"]["window_buckets"]) == ("merged", None)


def test_after_a_batch_the_top_videos_carry_the_views_their_stats_serve(
    api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    """The speed layer counted a burst of `series` before the cutoff that the batch refuses
    (conftest): once the batch is published, the top list's views are each video's stats route's,
    the batch's correction included; the list is ordered by the views of the window (a few new
    views each, now), which the answer gives apart."""
    history.count(tally)
    history.publish(settings, history.runs[0])
    e = Events(settings.bucket_ms, prefix="top")
    now = time.time_ns() // 1_000_000 // settings.bucket_ms
    fresh = [*e.views("series", now, "n1", "n2", "n3"), *e.views("cached", now, "n1", "n2")]
    fresh += e.views("merged", now, "n1")
    tally.ingest(fresh)
    tally.count()

    answer = api.get("/v1/overview", params={"window_buckets": 3}).json()

    top = [(v["video_id"], v["window_views"]) for v in answer["top"]]
    assert top == [("series", 3), ("cached", 2), ("merged", 1)]
    stats = {v: api.get(f"/v1/videos/{v}/stats").json() for v, _ in top}
    assert [v["views"] for v in answer["top"]] == [stats[v]["views"] for v, _ in top]
    truth = oracle.count([*history.events, *fresh])
    assert [v["views"] for v in answer["top"]] == [truth[v].views for v, _ in top]
    assert stats["series"]["corrected_by_batch"] == 30  # the burst the speed layer counted
    assert answer["scopes"]["top"]["source"] == "merged"


def _produce(bootstrap: str, records: Sequence[Record]) -> None:
    """The records onto the broker's topic, each to its partition, as the ingest API sends them.
    One write each: the local Tansu broker answers a partition's end offset after a write of several
    records as that write's first offset + 1 (seen with 5 records at once: end offset 1)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failures: list[str] = []
    for r in records:
        producer.produce(
            r.topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
        )
        assert producer.flush(30) == 0
    assert not failures, failures


def test_lag_is_what_the_topic_holds_beyond_what_the_counter_counted(
    settings: Settings, broker: str, redis_client: redis.Redis
) -> None:
    on_broker = settings.model_copy(update={"kafka_bootstrap": broker})
    ensure_topics(on_broker)
    e = Events(settings.bucket_ms, prefix="lag")
    bucket = closed_bucket(settings)
    videos = [f"v{n}" for n in range(8)]  # spread over both partitions
    with writers(on_broker) as tally, TestClient(create_app(on_broker)) as api:
        counted = tally.ingest([e.view(v, bucket, f"u{n}") for n in range(3) for v in videos])
        _produce(broker, counted)
        tally.count()
        waiting = tally.ingest([e.view(v, bucket + 1, f"w{n}") for n in range(2) for v in videos[:5]])
        _produce(broker, waiting)

        answer = api.get("/v1/overview").json()

    def per_partition(records: Sequence[Record]) -> dict[int, int]:
        return {p: sum(1 for r in records if r.partition == p) for p in range(settings.topic_partitions)}

    appended = per_partition([*counted, *waiting])
    assert answer["consumer_lag"] == {
        "topic": settings.events_topic,
        "total": len(waiting),
        "partitions": [
            {
                "partition": p,
                "end_offset": appended[p],
                "next_offset": per_partition(counted)[p],
                "lag": per_partition(waiting)[p],
            }
            for p in range(settings.topic_partitions)
        ],
    }
    assert all(per_partition(waiting).values()), "records wait on every partition"
    assert answer["degraded"] == []


@pytest.mark.serial  # the answer is timed (under 3 s with the broker away)
def test_a_broker_away_gives_null_lag_and_says_so(settings: Settings, redis_client: redis.Redis) -> None:
    away = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})
    e = Events(settings.bucket_ms, prefix="away")
    with writers(away) as tally, TestClient(create_app(away)) as api:
        counted = tally.ingest(e.views("v1", closed_bucket(settings), "u1", "u2"))
        tally.count()
        started = time.monotonic()
        answer = api.get("/v1/overview")
        waited = time.monotonic() - started
        again = api.get("/v1/overview").json()  # within the 2 s the failed reading is kept

    assert answer.status_code == 200
    assert waited < 3.0
    lag = answer.json()["consumer_lag"]
    assert lag["total"] is None
    assert lag["partitions"] == [
        {
            "partition": p,
            "end_offset": None,
            "next_offset": sum(1 for r in counted if r.partition == p),
            "lag": None,
        }
        for p in range(settings.topic_partitions)
    ]
    assert "consumer lag is unknown" in answer.json()["degraded"][0]
    assert away.kafka_bootstrap in answer.json()["degraded"][0]
    assert again["degraded"] == answer.json()["degraded"]


def test_batch_freshness_is_the_served_runs(api: TestClient, settings: Settings, history: History) -> None:
    assert api.get("/v1/overview").json()["batch"] is None
    run = history.runs[0]
    history.publish(settings, run)

    answer = api.get("/v1/overview").json()

    pointer = read_pointer(settings.baselines_dir)
    assert pointer is not None
    assert answer["batch"] == {
        "run_id": run.run_id,
        "rules_version": run.rules_version,
        "cutoff": run.cutoff,
        "published_at": pointer["published_at"],
        "age_secs": (answer["as_of"] - run.cutoff) / 1000,
        "stale": False,
    }
    assert not any("retention" in reason for reason in answer["degraded"])


def test_a_batch_older_than_the_retention_is_stale(
    settings: Settings, redis_client: redis.Redis, tally: Writers, history: History
) -> None:
    short = settings.model_copy(update={"retention_ms": settings.bucket_ms})
    tally.start()
    history.publish(short, history.runs[0])
    with TestClient(create_app(short)) as api:
        answer = api.get("/v1/overview").json()

    assert answer["batch"]["stale"] is True
    assert any("older than the speed retention" in reason for reason in answer["degraded"])


@pytest.mark.parametrize("window", ["0", "2001", "-3", "six"])
def test_a_bad_window_is_422_naming_it(api: TestClient, window: str) -> None:
    answer = api.get("/v1/overview", params={"window_buckets": window})

    assert answer.status_code == 422
    assert [e["field"] for e in answer.json()["errors"]] == ["window_buckets"]


def test_redis_away_is_503_saying_what_to_do(settings: Settings) -> None:
    away = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(away)) as api:
        answer = api.get("/v1/overview")

    assert answer.status_code == 503
    assert "TALLY_REDIS_URL" in answer.json()["errors"][0]["reason"]


def test_a_scripted_client_shows_in_the_bot_share(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    e = Events(settings.bucket_ms, prefix="share")
    bucket = closed_bucket(settings) + 1
    tally.ingest(
        [*e.views("v1", bucket, "u1", "u2", "u3"), *e.views("v1", bucket, "b1", user_agent=SCRIPTED)]
    )
    tally.count()

    share = api.get("/v1/overview", params={"window_buckets": 10}).json()["bot_share"]

    assert share == {
        "judged_views": 4,
        "rejected_views": 1,
        "share": 0.25,
        "by_reason": [{"reason": "scripted_agent", "views": 1, "share": 0.25}],
    }


def test_the_milestones_recorded_last_are_listed_newest_first(settings: Settings, history: History) -> None:
    from datetime import UTC, datetime

    from counting import oracle
    from tally.milestones import record_reached
    from warehouse.baseline import current_baseline

    ladder = settings.model_copy(update={"milestone_steps": [1, 2, 3, 5, 8]})
    run = history.runs[0]
    history.publish(ladder, run)
    baseline = current_baseline(ladder.baselines_dir)
    assert baseline is not None
    recorded = record_reached(ladder, baseline, datetime.now(UTC))

    with TestClient(create_app(ladder)) as api:
        answer = api.get("/v1/overview")
    assert answer.status_code == 200, answer.text  # a refusal names its reason (a CI run got one)
    listed = answer.json()["milestones"]

    truth = oracle.milestones(history.events, [run.cutoff], ladder.milestone_steps)
    assert {(m.video_id, m.step) for m in recorded} == truth
    assert len(listed) == min(10, len(truth))
    assert [(m["step"], m["video_id"]) for m in listed] == sorted(
        ((step, video) for video, step in truth), key=lambda item: (-item[0], item[1])
    )[: len(listed)]
    assert all(
        m["announced"] is False and m["milestone_id"] == f"{m['video_id']}:{m['step']}" for m in listed
    )
