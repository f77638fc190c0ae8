"""The in-memory bot windows: views per address in the 60 s up to a view, agents per address and
hour, views per viewer-day, bounded memory."""

from __future__ import annotations

import random

from counting import rules
from speed_layer.counter.windows import KEEP_HOUR_MS, KEEP_MINUTE_MS, LONG, ViewWindows
from tests.speed_layer.helpers import Traffic

NOW = 1_795_000_000_000


def test_counts_views_per_address_in_60_s_and_per_viewer_day() -> None:
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    ts = (NOW // rules.MINUTE_MS) * rules.MINUTE_MS + 30_000
    assert windows.observe(t.view("v", "u", ip="81.0.0.1", ts=ts)) == (1, 1, 1)
    assert windows.observe(t.view("v", "u", ip="81.0.0.1", ts=ts + 1)) == (2, 2, 1)
    # In the next minute, 60 s after the first: both earlier views are in its 60 s.
    assert windows.observe(t.view("w", "u", ip="81.0.0.1", ts=ts + rules.VELOCITY_WINDOW_MS - 1)) == (3, 1, 1)
    # 60 s after the second's next millisecond: the first two are out.
    assert windows.observe(t.view("x", "u", ip="81.0.0.1", ts=ts + rules.VELOCITY_WINDOW_MS + 1)) == (2, 1, 1)
    # A view seen late counts those up to its own time only.
    assert windows.observe(t.view("y", "u", ip="81.0.0.1", ts=ts + 2)) == (3, 1, 1)
    assert windows.observe(t.view("v", "u", ip=None, ts=ts + 2)) == (0, 3, 0)


def test_counts_distinct_agents_per_address_hour() -> None:
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    hour = (NOW // rules.HOUR_MS) * rules.HOUR_MS
    seen = [
        windows.observe(t.view("v", f"u{i}", ip="81.0.0.2", ts=hour + i * 120_000, user_agent=agent))[2]
        for i, agent in enumerate(["A agent 1", "A agent 1", None, "", "B agent 2", "C agent 3", "B agent 2"])
    ]
    assert seen == [1, 1, 1, 1, 2, 3, 3]
    copy = t.view("v", "c", ip="81.0.0.2", ts=hour + 1, user_agent="D agent 4")
    assert windows.observe(copy, count=False)[2] == 4  # a copy already counted adds nothing...
    assert windows.observe(t.view("v", "c", ip="81.0.0.2", ts=hour + 2, user_agent="E agent 5"))[2] == 4
    assert (
        windows.observe(t.view("v", "n", ip="81.0.0.2", ts=hour + rules.HOUR_MS, user_agent="A agent 1"))[2]
        == 1
    )


def test_a_busy_address_counts_as_one_seen_by_brute_force() -> None:
    """Past `LONG` views a minute and agents an hour an address's windows change how they keep them;
    every answer, in any order and with copies not counted, is what counting by hand gives."""
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    rng = random.Random(7)
    minute = (NOW // rules.HOUR_MS) * rules.HOUR_MS + 5 * rules.MINUTE_MS
    counted: list[tuple[int, str]] = []
    for n in range(3 * LONG):
        ts = minute + rng.randrange(2 * rules.MINUTE_MS)
        agent = f"agent {rng.randrange(2 * LONG)}"
        count = rng.random() > 0.1  # a tenth are copies already counted
        views, _, agents = windows.observe(
            t.view("v", f"u{n}", ip="81.0.0.3", ts=ts, user_agent=agent), count=count
        )
        mine = [(ts, agent)] if count else []
        expected_views = sum(1 for at, _ in counted + mine if ts - rules.VELOCITY_WINDOW_MS < at <= ts)
        expected_agents = len({a for _, a in counted} | {agent})
        assert (views, agents) == (max(expected_views, 1), expected_agents), n
        counted += mine
    assert len({a for _, a in counted}) > LONG


def test_a_window_is_judged_on_its_own_views_however_far_its_event_time_lags() -> None:
    """Views of other videos an hour back, then a burst from one address three hours back: the
    burst's minute and hour are its own, not dropped behind the newest event time seen."""
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    windows.advance(NOW)
    for i in range(500):
        windows.observe(t.view(f"o{i % 20}", f"u{i}", ts=NOW - rules.HOUR_MS + i * 100))
    start = NOW - 3 * rules.HOUR_MS
    burst = [
        windows.observe(t.view("v", f"b{i}", ip="203.0.113.7", ts=start + i * 40, user_agent=f"agent {i}"))
        for i in range(200)
    ]
    assert [views for views, _, _ in burst] == list(range(1, 201))
    assert [agents for _, _, agents in burst] == list(range(1, 201))


def test_windows_are_dropped_once_the_clock_passes_their_keep_and_late_views_count_from_one() -> None:
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    windows.advance(NOW)
    for minute in range(50):
        windows.observe(t.view("v", f"u{minute}", ip="81.0.0.9", ts=NOW + minute * rules.MINUTE_MS))
    late = t.view("v", "late", ip="81.0.0.9", ts=NOW, user_agent="another agent")
    assert windows.observe(late) == (2, 1, 2)  # its minute and hour still kept
    windows.advance(NOW + KEEP_MINUTE_MS + 1)
    assert windows.observe(late) == (1, 2, 2)  # the minute dropped, the hour and day kept
    windows.advance(NOW + KEEP_HOUR_MS + 1)
    assert windows.observe(late) == (1, 3, 1)
    assert windows.observe(late, count=False)[:2] == (1, 3)
    windows.advance(NOW - rules.DAY_MS)  # the clock never moves back
    assert windows.observe(late) == (2, 4, 1)
    # What is left: the late view's minute and hour, opened again, and the day's 51 viewers.
    assert len(windows) == 1 + 1 + 51


def test_counts_views_long_enough_and_near_the_threshold_per_video_day() -> None:
    windows = ViewWindows()
    day = (NOW // rules.DAY_MS) * rules.DAY_MS
    assert windows.observe_qualified(day, "v", near=False) == (0, 1)
    assert windows.observe_qualified(day + 1, "v", near=True) == (1, 2)
    assert windows.observe_qualified(day + 2, "v", near=True, count=False) == (1, 2)  # a copy
    assert windows.observe_qualified(day + 3, "w", near=True) == (1, 1)
    assert windows.observe_qualified(day + rules.DAY_MS, "v", near=True) == (1, 1)  # the next day
