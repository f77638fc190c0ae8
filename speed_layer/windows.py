"""The bot windows as the speed layer sees them fill: views per address per minute, views per
(video, viewer, day), and views long enough to count per (video, day) with those stopping near the
threshold, counted in worker memory (approximate; the batch layer is exact)."""

from __future__ import annotations

from typing import Generic, TypeVar

from counting import rules
from counting.event import Event

# How many minutes / days behind the newest one are still counted; a view of an older window
# counts as the first of its window (the batch layer, which sees whole windows, corrects it).
KEEP_MINUTES = 5
KEEP_DAYS = 2
_MINUTE_MS = rules.MINUTE_MS
_DAY_MS = rules.DAY_MS
_NEAR = "\x1fnear"

K = TypeVar("K")


class _Windows(Generic[K]):
    """Counters of the newest `keep` + 1 windows; older ones are dropped as newer ones open."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._newest: int | None = None
        self.counts: dict[int, dict[K, int]] = {}

    def open(self, window: int) -> dict[K, int] | None:
        """The counters of `window`, made when it is new; None for a window older than those kept."""
        counter = self.counts.get(window)
        if counter is None:
            if self._newest is not None and window < self._newest - self._keep:
                return None
            counter = self.counts[window] = {}
            if self._newest is None or window > self._newest:
                self._newest = window
                for old in [w for w in self.counts if w < window - self._keep]:
                    del self.counts[old]
        return counter

    def add(self, window: int, key: K, step: int) -> int:
        """Add `step` to `key` in `window`; return the key's count there (at least 1)."""
        counter = self.counts.get(window) or self.open(window)
        if counter is None:
            return 1
        value = counter.get(key, 0) + step
        counter[key] = value
        return value if value > 1 else 1


class ViewWindows:
    """Running window counts of the views one worker has seen (every view, counted or not)."""

    def __init__(self) -> None:
        self._address: _Windows[str] = _Windows(KEEP_MINUTES)
        # Keyed by one string (video, separator, viewer) rather than a tuple: a dict of strings and
        # integers is not tracked by the cyclic garbage collector, so its millions of entries cost
        # no scan time.
        self._viewer: _Windows[str] = _Windows(KEEP_DAYS)
        # Per video and day: its views long enough to count, and its `NEAR` key those near the threshold.
        self._video_day: _Windows[str] = _Windows(KEEP_DAYS)

    def observe(self, event: Event, count: bool = True) -> tuple[int, int]:
        """Count a view (unless `count` is false: a copy already counted); return (views from its
        address in its minute, views of its video by its viewer in its day), this one included:
        the inputs of `counting.bots.signals`."""
        return self.observe_view(event.ip, event.ts, event.video_id, rules.viewer_of(event), count)

    def observe_view(
        self, ip: str | None, ts: int, video_id: str, viewer: str, count: bool = True
    ) -> tuple[int, int]:
        """`observe` from the fields it needs (the counter's hot path has them at hand)."""
        # Both windows' `add`, inlined: this runs once per view on the counter's hot path.
        step = 1 if count else 0
        address_views = 0
        if ip is not None:
            minute = ts // _MINUTE_MS
            counter = self._address.counts.get(minute) or self._address.open(minute)
            if counter is None:
                address_views = 1
            else:
                address_views = counter.get(ip, 0) + step
                counter[ip] = address_views
                if address_views < 1:
                    address_views = 1
        day = ts // _DAY_MS
        by_viewer = self._viewer.counts.get(day) or self._viewer.open(day)
        if by_viewer is None:
            return address_views, 1
        key = f"{video_id}\x1f{viewer}"
        viewer_views = by_viewer.get(key, 0) + step
        by_viewer[key] = viewer_views
        return address_views, viewer_views if viewer_views > 1 else 1

    def observe_qualified(self, ts: int, video_id: str, near: bool, count: bool = True) -> tuple[int, int]:
        """Count a view long enough to count (unless `count` is false: a copy already counted), and
        whether it stopped near the threshold; return (views near the threshold, views long enough)
        of its video in its day, this one included: the inputs of `BotFilter.is_bunched`."""
        step = 1 if count else 0
        day = ts // _DAY_MS
        counter = self._video_day.counts.get(day) or self._video_day.open(day)
        if counter is None:
            return (1 if near else 0), 1
        qualified = counter.get(video_id, 0) + step
        counter[video_id] = qualified
        if not near:
            return counter.get(video_id + _NEAR, 0), max(qualified, 1)
        near_views = counter.get(video_id + _NEAR, 0) + step
        counter[video_id + _NEAR] = near_views
        return max(near_views, 1), max(qualified, 1)

    def __len__(self) -> int:
        return sum(
            len(c)
            for windows in (self._address, self._viewer, self._video_day)
            for c in windows.counts.values()
        )
