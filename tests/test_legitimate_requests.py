"""Whatever legitimate requests a client sends, the pipeline publishes what the oracle counts: generated
batches (retries inside one request and across requests, long and non-ASCII ids within the limits,
the oldest and newest event times accepted, optional fields absent, a like and an unlike of one
pair, a heartbeat and a leave of one session in one request) go through the real ingest API of the
local stack, its archiver, and `tally batch run`'s path with both data-quality gates."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from counting import oracle
from counting.event import MAX_AGE_MS, MAX_FUTURE_MS, Event, parse_event, stamped
from counting.settings import Settings
from tally import pipeline
from tally.speedview import wait_until, watermark
from tally.stack import Stack
from warehouse.baseline import current_baseline

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:module 'sre_(constants|parse)' is deprecated:DeprecationWarning"),
]

MINUTE_MS = 60_000
VIDEOS = ("clip", "v-2", "Long_video_id_" + "x" * 50)
USERS = ("u1", "ü2", "user-" + "9" * 59)
SESSIONS = ("s1", "séance-2", "s" * 64)
# Characters a client may put in an event id: ASCII, accented, CJK, an emoji, spaces, quotes.
ID_TEXT = st.text(st.sampled_from("abcXYZ019-_ é漢🙂'\"/"), min_size=1, max_size=64)
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36"


@st.composite
def _event(draw: st.DrawFn, event_id: str, now: int) -> dict[str, Any]:
    """One valid event of any type, each optional field present or not."""
    kind = draw(
        st.sampled_from(("view", "view", "like", "unlike", "dislike", "undislike", "heartbeat", "leave"))
    )
    ts = draw(
        st.sampled_from((now - MAX_AGE_MS + 10 * MINUTE_MS, now + MAX_FUTURE_MS - 10 * MINUTE_MS))
        | st.integers(now - 3 * 3_600_000, now)
    )
    event: dict[str, Any] = {
        "event_id": event_id,
        "type": kind,
        "video_id": draw(st.sampled_from(VIDEOS)),
        "ts": ts,
    }
    reaction = kind not in ("view", "heartbeat", "leave")
    if reaction or draw(st.booleans()):
        event["user_id"] = draw(st.sampled_from(USERS))
    if not reaction:
        event["session_id"] = draw(st.sampled_from(SESSIONS))
    if kind == "view" and draw(st.booleans()):
        event["watch_secs"] = draw(st.sampled_from((0.0, 29.999, 30.0, 95.5)))
    for field, values in (
        ("ip", ("198.51.100.7", "2001:db8::1")),
        ("user_agent", (BROWSER,)),
        ("video_duration_secs", (40.0, 600.0)),
    ):
        if draw(st.booleans()):
            event[field] = draw(st.sampled_from(values))
    return event


@st.composite
def _requests(draw: st.DrawFn, now: int) -> list[list[dict[str, Any]]]:
    """Requests drawn from a pool of distinct events: an event appears in several requests (a retry
    across requests) or twice in one (a client resending its buffer); one request holds a like and
    an unlike of one pair, and a heartbeat and a leave of one session."""
    ids = draw(st.lists(ID_TEXT, min_size=4, max_size=14, unique=True))
    pool = [draw(_event(event_id, now)) for event_id in ids]
    requests = draw(st.lists(st.lists(st.sampled_from(pool), min_size=1, max_size=8), min_size=1, max_size=5))
    pair = {"video_id": VIDEOS[0], "user_id": USERS[1], "ts": now - 5_000}
    session = {"video_id": VIDEOS[1], "session_id": SESSIONS[1]}
    tag = draw(st.integers(0, 10**9))
    requests.append(
        [
            {**pair, "event_id": f"like-{tag}", "type": "like"},
            {**pair, "event_id": f"unlike-{tag}", "type": "unlike", "ts": now - 4_000},
            {**session, "event_id": f"beat-{tag}", "type": "heartbeat", "ts": now - 3_000},
            {**session, "event_id": f"leave-{tag}", "type": "leave", "ts": now - 2_000},
        ]
    )
    return requests


def _post(api: httpx.Client, key: str, requests: list[list[dict[str, Any]]]) -> list[Event]:
    """Send the requests; every event sent, as the log keeps it (stamped with its request's time)."""
    sent: list[Event] = []
    for request in requests:
        answer = api.post("/v1/events", json={"events": request}, headers={"x-collector-key": key})
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["errors"] == [] and body["accepted"] == len({e["event_id"] for e in request})
        ingest_ts = body["ingest_ts"]
        sent += [stamped(parse_event(_json(e), ingest_ts), ingest_ts) for e in request]
    return sent


def _json(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def _counts(events: list[Event], cutoff: int) -> dict[str, tuple[int, int, int, int]]:
    counted = oracle.count(events, cutoff)
    found = {v: (c.views, c.likes, c.dislikes, c.unique_viewers) for v, c in counted.items()}
    return {v: c for v, c in found.items() if any(c)}


def test_legitimate_requests_publish_the_oracles_counts(
    stack: Stack, stack_settings: Settings, redis_client: redis.Redis
) -> None:
    conf = stack_settings
    sent: list[Event] = []
    api = httpx.Client(base_url=f"http://127.0.0.1:{conf.ingest_port}", timeout=30)

    @settings_for_the_stack
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        now = time.time_ns() // 1_000_000
        sent.extend(_post(api, conf.collector_key, data.draw(_requests(now))))
        cutoff = (max(e.ingest_ts or 0 for e in sent) // conf.bucket_ms + 1) * conf.bucket_ms
        wait_until(lambda: watermark(redis_client) >= cutoff, 90, f"the archiver closing cutoff {cutoff}")

        done = pipeline.batch_run(conf, cutoff)

        assert done.published and done.result.cutoff == cutoff
        baseline = current_baseline(conf.baselines_dir)
        assert baseline is not None
        served = {v: (r.views, r.likes, r.dislikes, r.unique_viewers) for v, r in baseline.rows.items()}
        assert {v: c for v, c in served.items() if any(c)} == _counts(sent, cutoff)

    try:
        run()
    finally:
        api.close()


# Each example is a batch run (about half a minute): a few, fixed, and no shrinking of a failure
# (its report names the requests).
settings_for_the_stack = settings(
    max_examples=3,
    derandomize=True,
    deadline=None,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
)
