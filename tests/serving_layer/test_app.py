"""The stats route against a real Redis and a published baseline, both filled by Tally's real writers:
the merge at the cutoff, the boundary moving, degraded answers (the `merged` video of the shared
history, see conftest), user reactions and presence."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from counting import oracle
from counting.event import Event, EventType
from counting.settings import Settings
from serving_layer.app import create_app
from tally.pipeline import expire_speed_buckets
from tally.services import free_port
from tests.serving_layer.conftest import Events
from tests.writers import History, Writers, closed_bucket

pytestmark = pytest.mark.integration

Counts = tuple[int, int, int, int]


def _counts(answer: dict[str, Any]) -> Counts:
    return answer["views"], answer["likes"], answer["dislikes"], answer["unique_viewers"]


def _oracle(events: list[Event], video: str, cutoff: int | None = None) -> Counts:
    c = oracle.count(events, cutoff)[video]
    return c.views, c.likes, c.dislikes, c.unique_viewers


def test_served_is_baseline_plus_speed_buckets_from_the_cutoff(
    api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    history.count(tally)
    run = history.runs[0]
    history.publish(settings, run)
    expected = _oracle(history.events, "merged")
    assert expected == (9, 2, 3, 8), "the story of `merged` (conftest) has what it says"
    assert _oracle(history.events, "merged", run.cutoff) == (6, 2, 1, 6)

    answer = api.get("/v1/videos/merged/stats").json()

    assert _counts(answer) == expected
    assert answer["rejected"] == oracle.count(history.events)["merged"].rejected == {"scripted_agent": 4}
    assert answer["batch_cutoff"] == run.cutoff
    assert answer["approx"] is False


def test_new_baseline_moves_the_boundary(
    api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    history.count(tally)
    first, second = history.runs[:2]
    expected = _oracle(history.events, "merged")
    history.publish(settings, first)
    assert _counts(api.get("/v1/videos/merged/stats").json()) == expected
    history.publish(settings, second)

    answer = api.get("/v1/videos/merged/stats").json()

    assert (_counts(answer), answer["batch_cutoff"]) == (expected, second.cutoff)
    assert answer["batch_run_id"] == second.run_id


def test_the_answer_says_by_how_much_the_batch_corrected_the_speed_layers_count(
    api: TestClient, settings: Settings, tally: Writers, history: History
) -> None:
    """`series` (conftest): before the cutoff the speed layer let 30 views of a burst through while
    its minute filled; the batch, seeing the whole minute, refuses them. The count falls by them
    at the publish, and the answer says so, as long as that baseline is served; a serving process
    that starts once the speed buckets before the cutoff are expired (as the DAG's last task expires
    them) no longer knows it."""
    history.count(tally)
    speed_only = api.get("/v1/videos/series/stats").json()
    assert speed_only["corrected_by_batch"] is None  # no batch yet
    run = history.runs[0]
    history.publish(settings, run)

    answer = api.get("/v1/videos/series/stats").json()

    assert answer["views"] == oracle.count(history.events)["series"].views == 16
    assert answer["corrected_by_batch"] == speed_only["views"] - answer["views"] == 30
    for video in ("merged", "cached"):  # nothing refused that the speed layer had counted
        assert api.get(f"/v1/videos/{video}/stats").json()["corrected_by_batch"] == 0

    expire_speed_buckets(settings, run.cutoff + settings.retention_ms)  # every bucket before C
    kept = api.get("/v1/videos/series/stats").json()
    with TestClient(create_app(settings)) as restarted:
        expired = restarted.get("/v1/videos/series/stats").json()

    assert (kept["views"], kept["corrected_by_batch"]) == (answer["views"], 30)
    assert (expired["views"], expired["corrected_by_batch"]) == (answer["views"], None)


def test_baseline_older_than_retention_is_flagged(
    settings: Settings, redis_client: redis.Redis, tally: Writers, history: History
) -> None:
    """A speed retention of one bucket: the baseline's cutoff, a minute ago, is older (as a batch
    that last ran days ago is under the default retention)."""
    short = settings.model_copy(update={"retention_ms": settings.bucket_ms})
    tally.start()
    run = history.runs[0]
    history.publish(short, run)
    with TestClient(create_app(short)) as api:
        answer = api.get("/v1/videos/merged/stats").json()
    assert _counts(answer) == _oracle(history.events, "merged", run.cutoff)
    assert answer["approx"] is True
    assert "older than the speed retention" in answer["degraded"][0]


def test_unknown_video_is_zero_and_bad_id_is_422(api: TestClient) -> None:
    answer = api.get("/v1/videos/never-seen/stats")
    assert answer.status_code == 200
    assert answer.json()["views"] == 0
    bad = api.get("/v1/videos/bad%20id/stats")
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "video_id"


# The reactions of u1 leaving each state, and what user_liked / user_disliked must say then.
REACTION_CASES: dict[str, tuple[list[EventType], tuple[bool, bool]]] = {
    "liked": (["like"], (True, False)),
    "disliked": (["like", "dislike"], (False, True)),
    "none after unlike": (["like", "unlike"], (False, False)),
    "none, never reacted": ([], (False, False)),
}


@pytest.mark.parametrize("writer", ["counter", "ingest reaction state"])
@pytest.mark.parametrize("case", list(REACTION_CASES))
def test_user_reaction_reads_what_each_writer_wrote(
    api: TestClient, settings: Settings, tally: Writers, case: str, writer: str
) -> None:
    kinds, expected = REACTION_CASES[case]
    e = Events(settings.bucket_ms)
    b = closed_bucket(settings)
    events = [e.reaction(kind, "v1", b, "u1") for kind in kinds]
    events.append(e.reaction("like", "v1", b + 1, "u2"))  # somebody else's reaction to the video
    if writer == "counter":  # the ingest's reaction-state write failed: only the counter has them
        tally.ingest(events, reaction_state=False)
        tally.count()
    else:  # acknowledged, not counted yet
        tally.ingest(events)

    answer = api.get("/v1/videos/v1/stats", params={"user_id": "u1"})

    assert answer.status_code == 200, answer.text
    assert (answer.json()["user_liked"], answer.json()["user_disliked"]) == expected
    assert answer.json()["degraded"] == []


def test_watching_now_counts_the_sessions_that_beat_within_a_minute(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    e = Events(settings.bucket_ms)
    now = time.time_ns() // 1_000_000
    tally.ingest([e.heartbeat("v1", "s1", now), e.heartbeat("v1", "s2", now - 5_000)])
    tally.ingest([e.heartbeat("v1", "s3", now - 120_000)])
    tally.count()

    assert api.get("/v1/videos/v1/stats").json()["watching_now"] == 2


def test_a_session_that_left_stops_watching_in_whatever_order_the_counter_applies_it(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    e = Events(settings.bucket_ms, prefix="leave")
    now = time.time_ns() // 1_000_000
    first = [
        e.heartbeat("v1", "stays", now - 1_000),
        e.heartbeat("v1", "left", now - 5_000),
        e.leave("v1", "left", now - 4_000),
        e.leave("v1", "late-beat", now - 2_000),  # applied before a heartbeat ingested earlier
        e.leave("v1", "back", now - 9_000),
        e.heartbeat("v1", "back", now - 3_000),  # left, then came back
        e.heartbeat("v1", "same-record", now - 1_500),
        e.leave("v1", "same-record", now - 1_500),  # one record's stamp: the leave wins
    ]
    later = [e.heartbeat("v1", "late-beat", now - 6_000), e.leave("v1", "back", now - 8_000)]
    tally.ingest(first)
    tally.count()
    tally.ingest(later)
    tally.count()

    answer = api.get("/v1/videos/v1/stats").json()

    assert answer["watching_now"] == oracle.watching_now(first + later, answer["as_of"])["v1"] == 2


def test_redis_down_serves_the_baseline_marked_approx(settings: Settings, history: History) -> None:
    down = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    run = history.runs[0]
    with TestClient(create_app(down)) as api:
        assert api.get("/v1/videos/merged/stats").status_code == 503
        history.publish(down, run)
        answer = api.get("/v1/videos/merged/stats")
        assert answer.status_code == 200
        assert _counts(answer.json()) == _oracle(history.events, "merged", run.cutoff)
        assert answer.json()["approx"] is True


def test_lost_speed_state_is_flagged(
    api: TestClient, settings: Settings, redis_client: redis.Redis, tally: Writers, history: History
) -> None:
    history.count(tally)
    run = history.runs[0]
    history.publish(settings, run)
    assert api.get("/v1/videos/merged/stats").json()["approx"] is False
    redis_client.flushdb()

    answer = api.get("/v1/videos/merged/stats").json()

    assert (_counts(answer), answer["approx"]) == (_oracle(history.events, "merged", run.cutoff), True)
    assert "tally speed rebuild" in answer["degraded"][0]


def test_readable_counts_stand_beside_the_exact_ones(
    api: TestClient, settings: Settings, tally: Writers
) -> None:
    e = Events(settings.bucket_ms, prefix="readable")
    bucket = closed_bucket(settings)
    events = e.views("v1", bucket, *(f"u{n}" for n in range(1_234)))
    events += [e.reaction("like", "v1", bucket, f"u{n}") for n in range(3)]
    tally.ingest(events)
    tally.count()

    answer = api.get("/v1/videos/v1/stats").json()

    assert _counts(answer) == _oracle(events, "v1") == (1_234, 3, 0, 1_234)
    shown = {f: answer[f"{f}_display"] for f in ("views", "likes", "dislikes", "unique_viewers")}
    assert shown == {"views": "1.2K", "likes": "3", "dislikes": "0", "unique_viewers": "1.2K"}
