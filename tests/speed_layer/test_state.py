"""A partition's state on its own: trimming what is older than the retry horizon."""

from __future__ import annotations

from counting import rules
from counting.event import Event
from speed_layer.judge import QUALIFIED
from speed_layer.state import SEP, PartitionState

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

    assert sorted(state.seen) == ["v1" + SEP + "new0"]
    assert [key.split(SEP)[1] for key in state.windows] == ["b0"]


def test_an_old_marker_behind_a_newer_one_goes_once_the_newer_one_does() -> None:
    state = PartitionState(bucket_ms=60_000, retention_ms=48 * HOUR, horizon_ms=HOUR)
    _count(state, _view("first", "a", T0 + HOUR))
    _count(state, _view("late", "b", T0))  # set after a newer one: ingested earlier, arrived later
    _count(state, _view("now", "c", T0 + 2 * HOUR))

    state.trim()
    kept_a_while = sorted(key.split(SEP)[1] for key in state.seen)
    _count(state, _view("later", "d", T0 + 3 * HOUR))
    state.trim()

    assert kept_a_while == ["first", "late", "now"]  # "first" is within the horizon: the scan stops
    assert sorted(key.split(SEP)[1] for key in state.seen) == ["later", "now"]
