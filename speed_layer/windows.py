"""The bot windows as the speed layer sees them fill: views per address per minute and views per
(video, viewer, day), counted in worker memory (approximate; the batch layer is exact)."""

from __future__ import annotations

from collections import Counter

from counting import rules
from counting.event import Event

# How many minutes / days behind the newest one are still counted; older windows start from zero.
KEEP_MINUTES = 5
KEEP_DAYS = 2


class ViewWindows:
    """Running window counts of the views one worker has seen (every view, counted or not)."""

    def __init__(self) -> None:
        self._address: dict[int, Counter[str]] = {}
        self._viewer: dict[int, Counter[tuple[str, str]]] = {}

    def observe(self, event: Event, count: bool = True) -> tuple[int, int]:
        """Count a view (unless `count` is false: a copy already counted); return (views from its
        address in its minute, views of its video by its viewer in its day), this one included:
        the inputs of `counting.bots.signals`."""
        step = 1 if count else 0
        minute = rules.minute_of(event.ts)
        day = rules.day_of(event.ts)
        address_views = 0
        if event.ip is not None:
            per_minute = self._address.get(minute)
            if per_minute is None:
                per_minute = self._address[minute] = Counter()
                _prune(self._address, KEEP_MINUTES)
            per_minute[event.ip] += step
            address_views = per_minute[event.ip]
        per_day = self._viewer.get(day)
        if per_day is None:
            per_day = self._viewer[day] = Counter()
            _prune(self._viewer, KEEP_DAYS)
        viewer_key = (event.video_id, rules.viewer_of(event))
        per_day[viewer_key] += step
        return address_views, per_day[viewer_key]

    def __len__(self) -> int:
        return sum(len(c) for c in self._address.values()) + sum(len(c) for c in self._viewer.values())


def _prune(windows: dict[int, Counter[str]] | dict[int, Counter[tuple[str, str]]], keep: int) -> None:
    """Forget the windows more than `keep` behind the newest one (a late event's old window included)."""
    oldest = max(windows) - keep
    for window in [w for w in windows if w < oldest]:
        del windows[window]
