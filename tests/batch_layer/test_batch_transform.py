"""The Spark transform on tiny DataFrames, one counting rule at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from batch_layer.totals import daily_video_counts
from batch_layer.transform import classify, transform
from counting import bots, rules
from counting.event import Event
from speed_layer.state.seen import fingerprint
from warehouse.baseline import COUNT_COLUMNS, REJECTED_COLUMNS

pytestmark = pytest.mark.slow

LogFrame = Callable[[Sequence[Event]], DataFrame]

DAY0 = 20_400 * rules.DAY_MS  # 2025-11-08T00:00Z: a day edge, so windows below are easy to place
T0 = DAY0 + 10 * 3_600_000
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
HOME_IP = "81.2.69.160"
_serial = iter(range(1, 1_000_000))


def view(video_id: str = "v1", *, ts: int = T0, **fields: Any) -> Event:
    """A human-looking qualified view; override any field."""
    n = next(_serial)
    values: dict[str, Any] = {
        "event_id": f"e{n:06d}",
        "user_id": f"u{n}",
        "session_id": f"s{n}",
        "ip": HOME_IP,
        "user_agent": BROWSER,
        "watch_secs": 45.0,
        "video_duration_secs": 120.0,
        "ingest_ts": ts + 500,
    }
    values.update(fields)
    return Event(type="view", video_id=video_id, ts=ts, **values)


def reaction(kind: str, user_id: str, ts: int, event_id: str, video_id: str = "v1") -> Event:
    return Event(event_id=event_id, type=kind, video_id=video_id, ts=ts, user_id=user_id, ingest_ts=ts + 100)


def row(video_id: str = "v1", **counts: int) -> Row:
    """An expected baseline row: zero for every count not given."""
    values = dict.fromkeys((*COUNT_COLUMNS, *REJECTED_COLUMNS), 0)
    values.update(counts)
    return Row(video_id=video_id, **values)


def check(log_frame: LogFrame, events: Sequence[Event], expected: list[Row]) -> None:
    assertDataFrameEqual(transform(log_frame(events)), expected)


def test_retries_count_once_and_the_first_ingested_copy_wins(log_frame: LogFrame) -> None:
    original = view(ingest_ts=T0 + 100)
    retry = Event(**{**_fields(original), "ingest_ts": T0 + 900})
    # Same id ingested later with a short watch time: the earlier copy decides.
    late_copy = Event(**{**_fields(original), "watch_secs": 3.0, "ingest_ts": T0 + 2_000})
    first_short = view("v2", watch_secs=5.0, ingest_ts=T0 + 100)
    second_long = Event(**{**_fields(first_short), "watch_secs": 300.0, "ingest_ts": T0 + 200})

    check(
        log_frame,
        [late_copy, retry, original, second_long, first_short],
        [row("v1", views=1, unique_viewers=1), row("v2", short_views=1)],
    )


def test_watch_threshold(log_frame: LogFrame) -> None:
    events = [
        view(watch_secs=rules.MIN_WATCH_SECS - 0.1),
        view(watch_secs=rules.MIN_WATCH_SECS),
        view(watch_secs=None),
        view(watch_secs=0.0),
        view(watch_secs=600.0),  # counted, flagged: watched longer than the video (0.5)
        Event(event_id="hb1", type="heartbeat", video_id="v1", ts=T0, session_id="s", ingest_ts=T0),
    ]
    check(log_frame, events, [row(views=2, unique_viewers=2, short_views=3, flagged=1)])


def test_one_view_per_viewer_and_window(log_frame: LogFrame) -> None:
    window = rules.VIEW_WINDOW_MS
    start = (T0 // window) * window
    events = [
        # Alice, three sessions in one window, then one more in the next window: 2 counted, 2 repeats.
        view(user_id="alice", session_id="a1", ts=start),
        view(user_id="alice", session_id="a2", ts=start + window - 1),
        view(user_id="alice", session_id="a3", ts=start + 60_000),
        view(user_id="alice", session_id="a4", ts=start + window),
        # Two anonymous sessions are two viewers; one anonymous session twice is a repeat.
        view(user_id=None, session_id="x", ts=start),
        view(user_id=None, session_id="x", ts=start + 1),
        view(user_id=None, session_id="y", ts=start),
        # A user named like an anonymous viewer's session is someone else.
        view(user_id="x", session_id="x", ts=start),
        # Another video: its own window.
        view("v2", user_id="alice", session_id="a1", ts=start),
    ]
    check(
        log_frame,
        events,
        [row("v1", views=5, repeat_views=3, unique_viewers=4), row("v2", views=1, unique_viewers=1)],
    )


def test_scripted_agents_are_rejected_with_python_regex_semantics(log_frame: LogFrame) -> None:
    events = [
        view(user_agent="Mozilla/5.0 HeadlessChrome/120.0"),
        view(user_agent="python-requests/2.32"),
        # U+017F matches `s` case-insensitively in Python's regex (not in Java's): the UDF decides.
        view(user_agent="\u017fpider/1.0"),
        view(user_agent="Mozilla/5.0 (compatible; Googlebot/2.1)"),  # no signal in this rule set
        view(user_agent=None),  # no agent: 0.5, counted and flagged
        # Scripted and short: a short view is short, whatever its signals.
        view(user_agent="curl/8.0", watch_secs=1.0),
    ]
    check(
        log_frame,
        events,
        [row(views=2, unique_viewers=2, short_views=1, rejected_scripted_agent=3, flagged=1)],
    )


def test_datacenter_and_tls_signals_add_up(log_frame: LogFrame) -> None:
    bad = sorted(bots.SHIPPED.bad_ja3)[0]
    events = [
        view("dc_only", ip="3.1.2.3"),  # 0.6: counted, flagged (the soft band starts at 0.5)
        view("ja3_only", ja3=bad.upper()),  # 0.6: counted, flagged (fingerprints compare lower-cased)
        view("dc_ja3", ip="52.1.2.3", ja3=bad),  # 1.2: tie of weights, datacenter_ip comes first
        view("dc_v6", ip="2600:1F00:0:0::5", ja3=bad),  # IPv6 range, non-canonical text
        view("v6_outside", ip="2600:1e00::1", ja3=bad),  # outside every range: 0.6
        view("mapped_v4", ip="::ffff:3.1.2.3", ja3=bad),  # IPv4-mapped: checked as its IPv4 address
        view("anomaly_ja3", watch_secs=500.0, video_duration_secs=60.0, ja3=bad),  # 1.1: bad_ja3
        view("anomaly_dc", watch_secs=bots.SHIPPED.max_watch_secs + 1, ip="159.89.3.4"),  # 1.1: datacenter_ip
        view("anomaly_only", watch_secs=500.0, video_duration_secs=60.0),  # 0.5: counted, flagged
        view("not_an_ip", ip="not-an-ip", ja3=bad),  # unparsable address: no datacenter signal
    ]
    counted = {"views": 1, "unique_viewers": 1, "flagged": 1}
    check(
        log_frame,
        events,
        [
            row("dc_only", **counted),
            row("ja3_only", **counted),
            row("dc_ja3", rejected_datacenter_ip=1),
            row("dc_v6", rejected_datacenter_ip=1),
            row("v6_outside", **counted),
            row("mapped_v4", rejected_datacenter_ip=1),
            row("anomaly_ja3", rejected_bad_ja3=1),
            row("anomaly_dc", rejected_datacenter_ip=1),
            row("anomaly_only", **counted),
            row("not_an_ip", **counted),
        ],
    )


def test_address_velocity_counts_every_view_of_the_address_in_the_minute(log_frame: LogFrame) -> None:
    minute = (T0 // rules.MINUTE_MS) * rules.MINUTE_MS
    limit = bots.SHIPPED.max_views_per_address_minute
    # At the limit, with one of them short: nothing rejected.
    at_limit = [view("calm", ip="10.0.0.1", ts=minute + i) for i in range(limit - 1)]
    at_limit.append(view("calm", ip="10.0.0.1", ts=minute + 59_999, watch_secs=2.0))
    # One over the limit (a short view of another video is still a view of the address).
    over = [view("busy", ip="10.0.0.2", ts=minute + i) for i in range(limit)]
    over.append(view("other", ip="10.0.0.2", ts=minute + 5, watch_secs=1.0))
    # The same number spread over two minutes: nothing rejected.
    spread = [view("spread", ip="10.0.0.3", ts=minute + i * 2_000) for i in range(limit + 5)]
    check(
        log_frame,
        at_limit + over + spread,
        [
            row("calm", views=limit - 1, unique_viewers=limit - 1, short_views=1),
            row("busy", rejected_address_velocity=limit),
            row("other", short_views=1),
            row("spread", views=limit + 5, unique_viewers=limit + 5),
        ],
    )


def test_replay_rate_counts_views_of_the_video_by_the_viewer_in_the_day(log_frame: LogFrame) -> None:
    window = rules.VIEW_WINDOW_MS
    limit = bots.SHIPPED.max_replays_per_day
    # Each view in its own window; addresses differ so that velocity stays quiet.
    loop = [view("loop", user_id="r", ts=DAY0 + i * window, ip=f"10.1.0.{i}") for i in range(limit + 1)]
    fine = [view("fine", user_id="r", ts=DAY0 + i * window, ip=f"10.2.0.{i}") for i in range(limit)]
    # Across a day edge: 12 on each day, nothing rejected.
    edge = [
        view("edge", user_id="r", ts=DAY0 + rules.DAY_MS + (i - limit) * window) for i in range(2 * limit)
    ]
    check(
        log_frame,
        loop + fine + edge,
        [
            row("loop", rejected_replay_rate=limit + 1),
            row("fine", views=limit, unique_viewers=1),
            row("edge", views=2 * limit, unique_viewers=1),
        ],
    )


def test_reaction_state_is_the_latest_by_ts_then_event_id(log_frame: LogFrame) -> None:
    events = [
        # Churn: like, unlike, like again -> liked (listed out of order).
        reaction("like", "a", T0 + 3, "a3"),
        reaction("like", "a", T0 + 1, "a1"),
        reaction("unlike", "a", T0 + 2, "a2"),
        # Same ts: the larger event_id is the later one.
        reaction("unlike", "b", T0, "b-2"),
        reaction("like", "b", T0, "b-1"),
        reaction("dislike", "c", T0, "c-1"),
        reaction("like", "c", T0, "c-2"),
        # Disliked, then undisliked: none. Liked twice: one like. Unlike never liked: nothing.
        reaction("dislike", "d", T0, "d1"),
        reaction("undislike", "d", T0 + 1, "d2"),
        reaction("like", "e", T0, "e1"),
        reaction("like", "e", T0 + 1, "e2"),
        reaction("unlike", "f", T0, "f1"),
        reaction("dislike", "g", T0, "g1"),
        # The same user's reaction to another video is its own pair.
        reaction("dislike", "a", T0 + 9, "a9", video_id="v2"),
    ]
    check(log_frame, events, [row("v1", likes=3, dislikes=1), row("v2", dislikes=1)])


def test_every_video_of_a_kept_event_has_a_row_and_an_empty_log_none(
    log_frame: LogFrame, spark: SparkSession
) -> None:
    events = [
        Event(event_id="h", type="heartbeat", video_id="quiet", ts=T0, session_id="s", ingest_ts=T0),
        Event(event_id="u", type="unlike", video_id="unliked", ts=T0, user_id="z", ingest_ts=T0),
    ]
    check(log_frame, events, [row("quiet"), row("unliked")])
    check(log_frame, [], [])


def test_daily_counts_split_by_event_day(log_frame: LogFrame) -> None:
    events = [
        view(user_id="a", ts=DAY0 - 1),
        view(user_id="a", ts=DAY0 + 1),
        view(user_id="a", ts=DAY0 + 2),
        reaction("like", "a", DAY0 - 5, "l1"),
        reaction("unlike", "a", DAY0 + 5, "l2"),
        reaction("like", "b", DAY0 + 5, "l3"),
    ]
    daily = daily_video_counts(classify(log_frame(events)))
    actual = {(r["date"].isoformat(), r["views"], r["repeat_views"], r["likes"]) for r in daily.collect()}
    assert actual == {("2025-11-07", 1, 0, 0), ("2025-11-08", 1, 1, 1)}


def _fields(event: Event) -> dict[str, Any]:
    return {f: getattr(event, f) for f in event.__struct_fields__}


def test_the_speed_layers_marker_fingerprint_is_sparks_xxhash64_of_the_same_text(spark: SparkSession) -> None:
    """The speed layer keys its markers by `seen.fingerprint`; Spark computes the same value
    (a signed long), so the batch layer can join on it."""
    pairs = [("v1", "e1"), ("video-ü", "3f1c2a9e-1b2c-4d5e-8f90-123456789abc"), ("v", "")]
    frame = spark.createDataFrame(pairs, "video_id string, event_id string")
    found = frame.select(F.xxhash64(F.concat_ws("\x1f", "video_id", "event_id"))).collect()
    assert [row[0] % (1 << 64) for row in found] == [fingerprint(v, e) for v, e in pairs]
