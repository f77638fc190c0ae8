"""A partition's state on its own: trimming what is older than the retry horizon; the sessions
watching."""

from __future__ import annotations

import random

import msgspec
import pytest

from counting import oracle, rules
from counting.event import Event
from counting.values import UnknownLayout
from speed_layer.counter.judge import QUALIFIED
from speed_layer.state.counted_views import window_key
from speed_layer.state.partition import PRESENCE_KEEP_MS, SEP, Entry, PartitionState
from speed_layer.state.partition_store import decode_entry, encode
from speed_layer.state.seen import fingerprint

HOUR = 3_600_000
T0 = 1_790_000_000_000


def _view(event_id: str, viewer: str, ingest_ts: int) -> Event:
    return Event(
        event_id=event_id,
        type="view",
        video_id="v1",
        ts=ingest_ts - 1_000,
        user_id=viewer,
        session_id=f"s-{viewer}",
        ip="203.0.113.7",
        user_agent="Mozilla/5.0",
        watch_secs=45.0,
        video_duration_secs=120.0,
        ingest_ts=ingest_ts,
    )


def _count(state: PartitionState, event: Event) -> None:
    viewer = event.user_id or ""
    state.arrive(event.ingest_ts or 0)
    state.count(event, QUALIFIED, viewer, rules.viewer_digest(viewer))


def test_a_trim_drops_the_markers_and_windows_past_the_retry_horizon() -> None:
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    for i in range(3):
        _count(state, _view(f"old{i}", f"a{i}", T0 + i))
    _count(state, _view("new0", "b0", T0 + 2 * HOUR))
    _count(state, _view("old1", "a1", T0 - 5))  # an earlier copy of old1: its marker moves earlier

    state.trim()

    assert [fp for fp, _ in state.seen.markers()] == [fingerprint("v1", "new0")]
    new_window = window_key("v1", "b0", rules.view_window_of(T0 + 2 * HOUR - 1_000))
    assert [key for key, _ in state.windows.items()] == [new_window]


def test_a_copy_within_the_horizon_changes_nothing_and_one_past_it_counts_again() -> None:
    """The markers are kept a retry horizon of ingest time: a copy within it is a duplicate; a copy
    arriving after the marker's slab was dropped counts again (until the batch, which dedupes the
    whole log)."""
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    assert state.count(_view("e1", "a", T0), QUALIFIED, "a", rules.viewer_digest("a"))
    copy = msgspec.structs.replace(_view("e1", "a", T0), ingest_ts=T0 + HOUR // 2)
    assert not state.count(copy, QUALIFIED, "a", rules.viewer_digest("a"))
    _count(state, _view("e2", "b", T0 + 2 * HOUR))
    state.delta()  # a micro-batch's end trims the markers

    late = msgspec.structs.replace(_view("e1", "a", T0), ingest_ts=T0 + 2 * HOUR + 1)
    assert state.seen.get(fingerprint("v1", "e1")) is None
    assert state.count(late, QUALIFIED, "a", rules.viewer_digest("a"))


def _presence(kind: str, n: int, video: str, session: str, ingest_ts: int) -> Event:
    return Event(
        event_id=f"{kind}{n}",
        type=kind,  # type: ignore[arg-type]
        video_id=video,
        ts=ingest_ts,
        user_id=None if session.startswith("anon") else f"u-{session}",
        session_id=session,
        ingest_ts=ingest_ts,
    )


def _watching(state: PartitionState, video: str, now: int) -> int:
    return sum(n for second, n in state.watching_of(video).items() if second >= rules.watching_from(now))


def test_the_sessions_watching_by_second_equal_the_oracle_in_any_order() -> None:
    """Heartbeats and leaves applied in a random order (leaves and beats of one ingest time among
    them): the sessions watching per second, summed as a reader sums them, equal the oracle's at
    every moment, and again after a restore from a snapshot."""
    rng = random.Random(5)
    events = []
    for n in range(600):
        kind = "leave" if rng.random() < 0.2 else "heartbeat"
        at = T0 + rng.randrange(0, 150_000, 5_000)  # often the same ingest time
        events.append(
            _presence(
                kind,
                n,
                rng.choice(["v1", "v2"]),
                rng.choice(["a", "b", "anon1"]) + str(rng.randrange(20)),
                at,
            )
        )
    rng.shuffle(events)
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    for event in events:
        state.presence(event)
    restored = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    restored.load(msgspec.msgpack.decode(msgspec.msgpack.encode(state.snapshot()), type=Entry))
    checked = 0
    for now in range(T0, T0 + 220_000, 700):
        expected = oracle.watching_now(events, now)
        for video in ("v1", "v2"):
            assert _watching(state, video, now) == expected.get(video, 0), (video, now)
            assert _watching(restored, video, now) == expected.get(video, 0), (video, now)
            checked += expected.get(video, 0)
    assert checked


def test_a_state_of_the_earlier_presence_layout_is_refused() -> None:
    """Before 2026-12-06 presence was two tables of text keys (`beats`, `leaves`): a state written so
    has no `sessions`, and restoring it is refused, naming the rebuild."""
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    state.presence(_presence("heartbeat", 1, "v1", "a1", T0))
    entry = state.snapshot()
    del entry["sessions"]
    entry["beats"], entry["leaves"] = {"v1" + SEP + "a1": [T0, 7]}, {}  # as the earlier layout wrote it
    with pytest.raises(UnknownLayout, match=r"sessions.*tally speed rebuild --replace"):
        decode_entry(encode(entry), "the snapshot of partition 0")


def test_a_trim_keeps_the_sessions_watching_that_a_reader_may_still_count() -> None:
    """Heartbeats and leaves over half an hour, then a trim (as before a snapshot): for every moment
    a reader may still ask about (from PRESENCE_KEEP_MS - PRESENCE_MS before the newest event on), the
    sessions watching equal the oracle's, and again after a restore of the trimmed state."""
    rng = random.Random(9)
    events = [
        _presence(
            "leave" if rng.random() < 0.25 else "heartbeat",
            n,
            "v1",
            f"s{rng.randrange(400)}",
            T0 + rng.randrange(0, 1_800_000, 500),
        )
        for n in range(3_000)
    ]
    newest = T0 + 1_800_700
    edge = (newest - PRESENCE_KEEP_MS) // 1000 * 1000  # the oldest second a reader may still count
    events += [  # a session that beat and left in that second, before the trim's cut to the ms
        _presence("heartbeat", 3_000, "v1", "edge", edge + 100),
        _presence("leave", 3_001, "v1", "edge", edge + 200),
        _presence("heartbeat", 3_002, "v1", "last", newest),
    ]
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    for event in events:
        state.arrive(event.ingest_ts or 0)
        state.presence(event)
    sessions = len(state.sessions)
    state.trim()
    assert 0 < len(state.sessions) < sessions
    restored = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    restored.load(msgspec.msgpack.decode(msgspec.msgpack.encode(state.snapshot()), type=Entry))
    checked = 0
    for now in range(newest - PRESENCE_KEEP_MS + rules.PRESENCE_MS, newest + rules.PRESENCE_MS, 1_300):
        expected = oracle.watching_now(events, now).get("v1", 0)
        assert _watching(state, "v1", now) == expected == _watching(restored, "v1", now), now
        checked += expected
    assert checked
