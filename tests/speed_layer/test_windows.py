"""The in-memory bot windows: counts per address-minute and viewer-day, bounded memory."""

from __future__ import annotations

from counting import rules
from speed_layer.windows import KEEP_MINUTES, ViewWindows
from tests.speed_layer.helpers import Traffic

NOW = 1_795_000_000_000


def test_counts_views_per_address_minute_and_viewer_day() -> None:
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    ts = (NOW // rules.MINUTE_MS) * rules.MINUTE_MS
    assert windows.observe(t.view("v", "u", ip="81.0.0.1", ts=ts)) == (1, 1)
    assert windows.observe(t.view("v", "u", ip="81.0.0.1", ts=ts + 1)) == (2, 2)
    assert windows.observe(t.view("w", "u", ip="81.0.0.1", ts=ts + rules.MINUTE_MS)) == (1, 1)
    assert windows.observe(t.view("v", "u", ip=None, ts=ts + 2)) == (0, 3)


def test_old_minutes_are_forgotten_and_late_views_count_from_one() -> None:
    t = Traffic(now_ms=NOW)
    windows = ViewWindows()
    for minute in range(50):
        windows.observe(t.view("v", f"u{minute}", ip="81.0.0.9", ts=NOW + minute * rules.MINUTE_MS))
    assert len(windows) <= KEEP_MINUTES + 1 + 50
    late = t.view("v", "late", ip="81.0.0.9", ts=NOW)
    assert windows.observe(late) == (1, 1)
    assert windows.observe(late) == (1, 2)


def test_counts_views_long_enough_and_near_the_threshold_per_video_day() -> None:
    windows = ViewWindows()
    day = (NOW // rules.DAY_MS) * rules.DAY_MS
    assert windows.observe_qualified(day, "v", near=False) == (0, 1)
    assert windows.observe_qualified(day + 1, "v", near=True) == (1, 2)
    assert windows.observe_qualified(day + 2, "v", near=True, count=False) == (1, 2)  # a copy
    assert windows.observe_qualified(day + 3, "w", near=True) == (1, 1)
    assert windows.observe_qualified(day + rules.DAY_MS, "v", near=True) == (1, 1)  # the next day
