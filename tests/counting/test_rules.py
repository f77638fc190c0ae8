"""The counting rules at and around their thresholds: qualified views, viewers, windows, reactions."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from counting import rules
from counting.event import EVENT_TYPES, Event, stamped

EXAMPLES = settings(max_examples=60, deadline=None)


def _event(make_event, kind="view", **fields) -> Event:
    return msgspec.convert(make_event(kind, **fields), type=Event)


def test_a_view_qualifies_at_the_minimum_watch_and_not_just_below(make_event):
    at = _event(make_event, watch_secs=rules.MIN_WATCH_SECS)
    below = _event(make_event, watch_secs=rules.MIN_WATCH_SECS - 0.001)

    assert rules.is_qualified_view(at) is True
    assert rules.is_qualified_view(below) is False


def test_a_view_without_watch_time_does_not_qualify(make_event):
    assert rules.is_qualified_view(_event(make_event, watch_secs=None)) is False


@pytest.mark.parametrize("kind", [k for k in EVENT_TYPES if k != "view"])
def test_only_views_qualify(kind, make_event):
    assert rules.is_qualified_view(_event(make_event, kind)) is False


def test_the_viewer_is_the_user_when_logged_in_else_the_anonymous_session(make_event):
    assert rules.viewer_of(_event(make_event, user_id="u-7", session_id="s-7")) == "u-7"
    assert rules.viewer_of(_event(make_event, session_id="s-7")) == "anon:s-7"


def test_a_user_named_like_an_anonymous_viewer_is_still_that_user(make_event):
    assert rules.viewer_of(_event(make_event, user_id="anon:s-1", session_id="s-2")) == "anon:s-1"


@EXAMPLES
@given(window=st.integers(0, 10**6))
def test_the_view_window_edges(window):
    edge = window * rules.VIEW_WINDOW_MS

    assert rules.view_window_of(edge) == window
    assert rules.view_window_of(edge + rules.VIEW_WINDOW_MS - 1) == window
    assert rules.view_window_of(edge - 1) == window - 1


def test_the_view_window_is_thirty_minutes():
    assert rules.VIEW_WINDOW_MS == 30 * 60_000


@EXAMPLES
@given(n=st.integers(0, 10**7))
def test_minute_and_day_edges(n):
    assert rules.minute_of(n * rules.MINUTE_MS) == n
    assert rules.minute_of(n * rules.MINUTE_MS - 1) == n - 1
    assert rules.day_of(n * rules.DAY_MS) == n
    assert rules.day_of(n * rules.DAY_MS - 1) == n - 1


@EXAMPLES
@given(bucket_ms=st.integers(1, 10**8), bucket=st.integers(0, 10**6), inside=st.integers(0, 10**8))
def test_buckets_are_by_ingestion_time_and_cutoffs_sit_on_edges(bucket_ms, bucket, inside):
    inside %= bucket_ms
    edge = bucket * bucket_ms

    assert rules.bucket_of(edge + inside, bucket_ms) == bucket
    assert rules.is_on_bucket_edge(edge, bucket_ms) is True
    assert rules.is_on_bucket_edge(edge + inside, bucket_ms) is (inside == 0)


def test_each_reaction_leaves_its_state():
    assert rules.reaction_state("like") == rules.LIKED
    assert rules.reaction_state("dislike") == rules.DISLIKED
    assert rules.reaction_state("unlike") == rules.NONE
    assert rules.reaction_state("undislike") == rules.NONE


@pytest.mark.parametrize("kind", ["view", "heartbeat"])
def test_views_and_heartbeats_are_not_reactions(kind):
    with pytest.raises(KeyError):
        rules.reaction_state(kind)


def test_the_latest_reaction_is_by_ts_then_event_id(make_event):
    early = _event(make_event, "like", event_id="z", ts=1_000)
    late = _event(make_event, "unlike", event_id="a", ts=1_001)
    tie = _event(make_event, "unlike", event_id="b", ts=1_000)

    assert rules.reaction_order(late) > rules.reaction_order(early)
    assert rules.reaction_order(early) > rules.reaction_order(tie)


def test_the_first_copy_is_the_one_ingested_first(make_event):
    event = _event(make_event)

    assert rules.first_copy_order(stamped(event, 5)) < rules.first_copy_order(stamped(event, 6))


def test_a_session_watches_while_its_heartbeats_second_is_within_presence_of_nows() -> None:
    """Presence is counted by whole seconds of ingestion time: a heartbeat counts until the second
    of now - PRESENCE_MS has passed it; a leave ingested at or after it ends it."""
    now = 1_790_000_030_500
    first = rules.watching_from(now)
    assert first == (now - rules.PRESENCE_MS) // 1000
    assert rules.is_watching(first * 1000, None, now)  # up to 500 ms older than PRESENCE_MS
    assert not rules.is_watching(first * 1000 - 1, None, now)
    assert rules.is_watching(now, now - 1, now)
    assert not rules.is_watching(now, now, now)  # the leave wins a tie
    assert not rules.is_watching(None, None, now)


@EXAMPLES
@given(
    plan=st.lists(
        st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(1_000, 1_003))), min_size=0, max_size=12
    )
)
def test_first_copies_keep_one_copy_of_each_event_id_the_one_that_counts(plan, make_event):
    """(id, ingest_ts) per event: the copy kept is the first by `first_copy_order`, the earlier one
    among equals; every copy left out is named with the copy kept in its place."""
    events = [msgspec.structs.replace(_event(make_event, event_id=f"e{i}"), ingest_ts=ts) for i, ts in plan]

    kept, left_out = rules.first_copies(events)

    best: dict[str, int] = {}
    for position, event in enumerate(events):
        other = best.get(event.event_id)
        if other is None or rules.first_copy_order(event) < rules.first_copy_order(events[other]):
            best[event.event_id] = position
    assert kept == [e for p, e in enumerate(events) if p in set(best.values())]
    assert left_out == sorted((p, best[e.event_id]) for p, e in enumerate(events) if p != best[e.event_id])
