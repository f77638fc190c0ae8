"""The bot windows as the speed layer sees them fill: views per address per minute and views per
(video, viewer, day), counted in worker memory (approximate; the batch layer is exact)."""

from __future__ import annotations

from typing import Generic, TypeVar

from counting import rules
from counting.event import Event

# How many minutes / days behind the newest one are still counted; a view of an older window
# counts as the first of its window (the batch layer, which sees whole windows, corrects it).
KEEP_MINUTES = 5
KEEP_DAYS = 2

K = TypeVar("K")


class _Windows(Generic[K]):
    """Counters of the newest `keep` + 1 windows; older ones are dropped as newer ones open."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._newest: int | None = None
        self.counts: dict[int, dict[K, int]] = {}

    def add(self, window: int, key: K, step: int) -> int:
        """Add `step` to `key` in `window`; return the key's count there (at least 1)."""
        counter = self.counts.get(window)
        if counter is None:
            if self._newest is not None and window < self._newest - self._keep:
                return 1
            counter = self.counts[window] = {}
            if self._newest is None or window > self._newest:
                self._newest = window
                for old in [w for w in self.counts if w < window - self._keep]:
                    del self.counts[old]
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

    def observe(self, event: Event, count: bool = True) -> tuple[int, int]:
        """Count a view (unless `count` is false: a copy already counted); return (views from its
        address in its minute, views of its video by its viewer in its day), this one included:
        the inputs of `counting.bots.signals`."""
        return self.observe_view(event.ip, event.ts, event.video_id, rules.viewer_of(event), count)

    def observe_view(
        self, ip: str | None, ts: int, video_id: str, viewer: str, count: bool = True
    ) -> tuple[int, int]:
        """`observe` from the fields it needs (the counter's hot path has them at hand)."""
        step = 1 if count else 0
        address_views = 0
        if ip is not None:
            address_views = self._address.add(ts // rules.MINUTE_MS, ip, step)
        viewer_views = self._viewer.add(ts // rules.DAY_MS, f"{video_id}\x1f{viewer}", step)
        return address_views, viewer_views

    def __len__(self) -> int:
        return sum(len(c) for c in self._address.counts.values()) + sum(
            len(c) for c in self._viewer.counts.values()
        )
