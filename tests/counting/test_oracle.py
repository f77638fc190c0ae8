"""The reference counter: order and retries change nothing, reactions are idempotent, cutoffs filter,
and small examples whose expected counts are worked out by hand from the rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from counting import bots, oracle, rules
from counting.event import EVENT_TYPES, REACTION_TYPES, Event
from counting.oracle import VideoCounts
from tests.rulesfiles import threshold_gamed_views

EXAMPLES = settings(max_examples=80, deadline=None)
T0 = 1_780_272_000_000  # a day, minute and window edge
BROWSER = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/124.0.0.0"
HEADLESS = "Mozilla/5.0 HeadlessChrome/124.0.0.0"
BAD_JA3 = sorted(bots.SHIPPED.bad_ja3)[0]


def ev(event_id: str, kind: str, ts: int = T0, ingest: int | None = None, **fields: Any) -> Event:
    """A stamped event; ingested when it happened unless told otherwise."""
    return Event(event_id=event_id, type=kind, ts=ts, ingest_ts=ts if ingest is None else ingest, **fields)


def view(event_id: str, viewer: str, ts: int = T0, watch: float = 45.0, **fields: Any) -> Event:
    """A stamped view from a browser (its agent unless `fields` say otherwise)."""
    who = {"session_id": viewer[5:]} if viewer.startswith("anon:") else {"user_id": viewer, "session_id": "s"}
    fields.setdefault("video_id", "v1")
    fields.setdefault("user_agent", BROWSER)
    return ev(event_id, "view", ts, watch_secs=watch, **who, **fields)


def react(event_id: str, kind: str, user: str, ts: int = T0, video: str = "v1", **fields: Any) -> Event:
    return ev(event_id, kind, ts, user_id=user, video_id=video, **fields)


def nonzero(counts: dict[str, VideoCounts]) -> dict[str, VideoCounts]:
    return {video: c for video, c in counts.items() if c != VideoCounts()}


@st.composite
def event_lists(draw: st.DrawFn, max_size: int = 25) -> list[Event]:
    """Small traffic over two videos and a few viewers, addresses and agents, across three windows;
    sometimes with a burst from one address in one minute (the velocity signal)."""
    events = []
    for i in range(draw(st.integers(0, max_size))):
        kind = draw(st.sampled_from(EVENT_TYPES))
        fields: dict[str, Any] = {
            "event_id": f"e{i}",
            "type": kind,
            "video_id": draw(st.sampled_from(["v1", "v2"])),
            "ts": T0 + draw(st.integers(0, 3 * rules.VIEW_WINDOW_MS)),
            "ingest_ts": T0 + draw(st.integers(0, 4 * rules.VIEW_WINDOW_MS)),
        }
        if kind in REACTION_TYPES:
            fields["user_id"] = draw(st.sampled_from(["u1", "u2", "u3"]))
        else:
            fields["user_id"] = draw(st.sampled_from(["u1", "u2", None]))
            fields["session_id"] = draw(st.sampled_from(["s1", "s2"]))
        if kind == "view":
            fields["watch_secs"] = draw(st.sampled_from([0.0, 12.0, rules.MIN_WATCH_SECS, 60.0, 900.0]))
            fields["video_duration_secs"] = draw(st.sampled_from([None, 40.0, 600.0]))
            fields["ip"] = draw(st.sampled_from([None, "10.0.0.1", "10.0.0.2", "52.0.0.9"]))
            fields["user_agent"] = draw(st.sampled_from([None, BROWSER, HEADLESS]))
            fields["ja3"] = draw(st.sampled_from([None, BAD_JA3]))
        events.append(Event(**fields))
    if draw(st.booleans()):
        size = draw(
            st.integers(
                bots.SHIPPED.max_views_per_address_minute - 1, bots.SHIPPED.max_views_per_address_minute + 2
            )
        )
        minute = T0 + draw(st.integers(0, 90)) * rules.MINUTE_MS
        for i in range(size):
            ts = minute + draw(st.integers(0, rules.MINUTE_MS - 1))
            events.append(view(f"burst{i}", f"anon:b{i}", ts, ip="10.9.9.9", ingest=ts + 1))
    return events


@EXAMPLES
@given(data=st.data(), events=event_lists())
def test_any_order_of_the_same_events_gives_the_same_counts(data, events):
    shuffled = data.draw(st.permutations(events))

    assert oracle.count(shuffled) == oracle.count(events)


@EXAMPLES
@given(data=st.data(), events=event_lists())
def test_retries_change_nothing(data, events):
    retried = data.draw(st.lists(st.sampled_from(events), max_size=10)) if events else []
    delays = data.draw(st.lists(st.integers(1, 10**7), min_size=len(retried), max_size=len(retried)))
    copies = [
        msgspec.structs.replace(e, ingest_ts=e.ingest_ts + d) for e, d in zip(retried, delays, strict=True)
    ]
    mixed = data.draw(st.permutations(events + copies))

    assert oracle.count(mixed) == oracle.count(events)


@EXAMPLES
@given(events=event_lists(), times=st.integers(2, 5))
def test_reaction_retries_are_idempotent(events, times):
    reactions = [e for e in events if e.type in REACTION_TYPES]
    resent = events + [
        msgspec.structs.replace(e, ingest_ts=e.ingest_ts + k) for e in reactions for k in range(1, times)
    ]

    assert oracle.count(resent) == oracle.count(events)


@EXAMPLES
@given(stamps=st.lists(st.integers(0, 10**6), min_size=1, max_size=6))
def test_liking_any_number_of_times_is_one_like(stamps):
    likes = [react(f"like{i}", "like", "u1", T0 + ts) for i, ts in enumerate(stamps)]

    assert oracle.count(likes)["v1"].likes == 1


@EXAMPLES
@given(events=event_lists(), delay=st.integers(1, 10**6))
def test_liking_again_a_liked_video_changes_nothing(events, delay):
    liked = [*events, react("first-like", "like", "u9", T0 + 5 * rules.VIEW_WINDOW_MS)]
    again = [*liked, react("second-like", "like", "u9", T0 + 5 * rules.VIEW_WINDOW_MS + delay)]

    assert oracle.count(again) == oracle.count(liked)


@EXAMPLES
@given(events=event_lists(), video=st.sampled_from(["v1", "v2"]), ts=st.integers(0, 10**7))
def test_unliking_a_video_never_liked_changes_nothing(events, video, ts):
    unliked = [*events, react("stray-unlike", "unlike", "never-reacted", T0 + ts, video=video)]
    undisliked = [*events, react("stray-undislike", "undislike", "never-reacted", T0 + ts, video=video)]

    assert nonzero(oracle.count(unliked)) == nonzero(oracle.count(events))
    assert nonzero(oracle.count(undisliked)) == nonzero(oracle.count(events))


@EXAMPLES
@given(events=event_lists(), cutoff=st.integers(0, 4 * rules.VIEW_WINDOW_MS + 1))
def test_a_cutoff_counts_exactly_the_events_ingested_before_it(events, cutoff):
    cutoff += T0
    before = [e for e in events if e.ingest_ts is not None and e.ingest_ts < cutoff]

    assert oracle.count(events, cutoff) == oracle.count(before)


def test_a_cutoff_drops_a_retry_ingested_after_it_but_keeps_its_first_copy():
    first = view("e1", "u1", ingest=T0 + 10)
    retry = msgspec.structs.replace(first, ingest_ts=T0 + 5_000)

    assert oracle.count([first, retry], cutoff=T0 + 1_000)["v1"].views == 1
    assert oracle.count([retry], cutoff=T0 + 1_000) == {}


def test_views_unique_viewers_short_repeat_and_rejected_by_hand():
    minute = rules.MINUTE_MS
    events = [
        view("a", "u1", T0),  # counted: u1, window 0
        view("b", "u1", T0 + 10 * minute),  # repeat: u1 already counted in window 0
        view("c", "u1", T0 + 31 * minute),  # counted: u1, window 1
        view("d", "anon:s9", T0 + 1 * minute, watch=20.0),  # short
        view("e", "anon:s9", T0 + 5 * minute, watch=30.0),  # counted: anon:s9
        view("f", "u2", T0 + 2 * minute, user_agent=HEADLESS),  # rejected: scripted agent
        view("g", "u3", T0 + 3 * minute, ip="52.0.0.5", ja3=BAD_JA3),  # rejected: data centre + bad TLS
        view("h", "u4", T0 + 4 * minute, ip="52.0.0.6"),  # counted, flagged: data centre alone scores 0.6
        view("i", "u5", T0 + 6 * minute, watch=100.0, video_duration_secs=60.0),  # counted, flagged: 0.5
        msgspec.structs.replace(view("a", "u1", T0), ingest_ts=T0 + 9 * minute),  # retry of a
        ev("j", "heartbeat", T0, video_id="v1", session_id="s1"),  # presence only
    ]

    counts = oracle.count(events)

    assert counts == {
        "v1": VideoCounts(
            views=5,
            likes=0,
            dislikes=0,
            unique_viewers=4,
            rejected={"scripted_agent": 1, "datacenter_ip": 1},
            short_views=1,
            repeat_views=1,
            flagged=2,
        )
    }


def test_address_velocity_by_hand():
    limit = bots.SHIPPED.max_views_per_address_minute
    at_limit = [view(f"a{i}", f"a{i}", T0 + i * 1_000, ip="10.0.0.1") for i in range(limit)]
    over = [view(f"b{i}", f"b{i}", T0 + i * 1_000, ip="10.0.0.2", video_id="v2") for i in range(limit + 1)]
    # 60 s after the first of `over`: its 60 s hold the other `limit` of them and itself: over too.
    edge = view("c", "c", T0 + rules.VELOCITY_WINDOW_MS - 1, ip="10.0.0.2", video_id="v2")
    # Its 60 s hold the last `limit` - 2 of `over`, `edge` and itself: counted (none busier holds it).
    after = view("d", "d", T0 + 3_000 + rules.VELOCITY_WINDOW_MS - 1, ip="10.0.0.2", video_id="v3")

    counts = oracle.count([*at_limit, *over, edge, after])

    assert (counts["v1"].views, counts["v1"].rejected) == (limit, {})
    assert (counts["v2"].views, counts["v2"].rejected) == (0, {"address_velocity": limit + 2})
    assert (counts["v3"].views, counts["v3"].rejected) == (1, {})


def test_a_burst_straddling_a_minute_edge_gets_no_more_than_the_limit():
    """Fixed minutes let 2 x limit views through a burst split by a minute's edge; 60 s that slide
    hold them all, so all are refused."""
    limit = bots.SHIPPED.max_views_per_address_minute
    edge = T0 - T0 % rules.MINUTE_MS + 10 * rules.MINUTE_MS
    burst = [view(f"s{i}", f"s{i}", edge - limit * 100 + i * 100, ip="10.0.0.3") for i in range(2 * limit)]
    assert {rules.minute_of(e.ts) for e in burst} == {rules.minute_of(edge) - 1, rules.minute_of(edge)}
    assert (
        sum(rules.minute_of(e.ts) == rules.minute_of(edge) for e in burst) == limit
    )  # each minute: at the limit

    counts = oracle.count(burst)

    assert (counts["v1"].views, counts["v1"].rejected) == (0, {"address_velocity": 2 * limit})


def test_agent_rotation_by_hand():
    limit = bots.SHIPPED.max_agents_per_address_hour
    agents = [f"{BROWSER} Build/{n}" for n in range(limit + 1)]
    hour = T0 - T0 % rules.HOUR_MS + 2 * rules.HOUR_MS
    # One address, `limit` agents in one hour (counted); another, `limit + 1` (all refused); the
    # next hour starts afresh; a view without an agent is no agent of the count.
    home = [
        view(f"h{i}", f"h{i}", hour + i * 60_000, ip="10.0.1.1", user_agent=a)
        for i, a in enumerate(agents[:limit])
    ]
    home.append(view("h-none", "h-none", hour + 30 * 60_000, ip="10.0.1.1", user_agent=None))
    farm = [
        view(f"f{i}", f"f{i}", hour + i * 60_000, ip="10.0.1.2", user_agent=a, video_id="v2")
        for i, a in enumerate(agents)
    ]
    later = view(
        "f-later", "f-later", hour + rules.HOUR_MS, ip="10.0.1.2", user_agent=agents[0], video_id="v3"
    )

    counts = oracle.count([*home, *farm, later])

    assert (counts["v1"].views, counts["v1"].rejected) == (limit + 1, {})
    assert (counts["v2"].views, counts["v2"].rejected) == (0, {"agent_rotation": limit + 1})
    assert (counts["v3"].views, counts["v3"].rejected) == (1, {})


def test_replay_rate_by_hand():
    limit = bots.SHIPPED.max_replays_per_day
    window = rules.VIEW_WINDOW_MS
    at_limit = [view(f"a{i}", "u1", T0 + i * window) for i in range(limit)]
    over = [view(f"b{i}", "u2", T0 + i * window, video_id="v2") for i in range(limit + 1)]
    next_day = view("c", "u2", T0 + rules.DAY_MS, video_id="v2")

    counts = oracle.count([*at_limit, *over, next_day])

    assert (counts["v1"].views, counts["v1"].unique_viewers, counts["v1"].rejected) == (limit, 1, {})
    assert (counts["v2"].views, counts["v2"].unique_viewers) == (1, 1)
    assert counts["v2"].rejected == {"replay_rate": limit + 1}


def test_likes_and_dislikes_by_hand():
    events = [
        react("1", "like", "u1", T0 + 1),
        react("2", "unlike", "u1", T0 + 2),  # u1: none
        react("3", "like", "u2", T0 + 1),
        react("4", "like", "u2", T0 + 2),  # u2: liked (twice is once)
        react("5", "dislike", "u3", T0 + 1),  # u3: disliked
        react("6", "unlike", "u4", T0 + 1),  # u4: none (never liked)
        react("b", "like", "u5", T0 + 5),
        react("a", "unlike", "u5", T0 + 5),  # u5: same ts, event_id "b" > "a": liked
        react("7", "dislike", "u6", T0 + 1),
        react("8", "like", "u6", T0 + 2),  # u6: liked
        react("9", "like", "u7", T0 + 9),
        ev("10", "dislike", T0 + 8, ingest=T0 + 99, user_id="u7", video_id="v1"),  # older ts: u7 liked
        react("11", "dislike", "u8", T0 + 1),
        react("12", "undislike", "u8", T0 + 2),  # u8: none
        react("13", "like", "u1", T0, video="v2"),  # another video
    ]

    counts = oracle.count(events)

    assert (counts["v1"].likes, counts["v1"].dislikes, counts["v1"].views) == (4, 1, 0)
    assert (counts["v2"].likes, counts["v2"].dislikes) == (1, 0)
    assert oracle.reactions(events)[("u7", "v1")] == rules.LIKED


def test_counts_as_of_a_cutoff_by_hand():
    events = [
        view("a", "u1", T0, ingest=T0 + 1_000),
        view("b", "u2", T0, ingest=T0 + 3_000),
        react("c", "like", "u1", T0, ingest=T0 + 1_500),
        react("d", "unlike", "u1", T0 + 1, ingest=T0 + 2_500),
    ]

    assert dataclasses.astuple(oracle.count(events, T0 + 2_000)["v1"]) == (1, 1, 0, 1, {}, 0, 0, 0)
    assert dataclasses.astuple(oracle.count(events, T0 + 3_000)["v1"]) == (1, 0, 0, 1, {}, 0, 0, 0)
    assert dataclasses.astuple(oracle.count(events)["v1"]) == (2, 0, 0, 2, {}, 0, 0, 0)


def test_no_events_no_counts():
    assert oracle.count([]) == {}


def test_threshold_bunching_by_hand():
    counts = oracle.count(threshold_gamed_views(1_780_272_000_000))
    bunching = bots.THRESHOLD_BUNCHING
    assert (counts["vid-gamed"].views, counts["vid-gamed"].rejected) == (40, {bunching: 12})
    assert (counts["vid-nine"].views, counts["vid-nine"].rejected) == (9, {})
    assert (counts["vid-share-in"].views, counts["vid-share-in"].rejected) == (40, {bunching: 10})
    assert (counts["vid-share-out"].views, counts["vid-share-out"].rejected) == (51, {})
    assert (counts["vid-short"].views, counts["vid-late"].views) == (20, 12)
