"""The bot windows as the speed layer sees them fill: views per address in the 60 s up to a view,
distinct agents per address and hour, views per (video, viewer, day), and views long enough to
count per (video, day) with those stopping near the threshold, counted in worker memory
(approximate; the batch layer is exact).

A window is kept for a span of the worker's clock (the newest ingest time it has seen) from when
it opened, whatever the event times of other videos or partitions: views whose event time lags the
others' (a backdating client, a partition catching up) are judged on their own window like any
other. A view of a window already dropped counts as the first of its window; the batch, which sees
whole windows, corrects it."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from typing import Generic, TypeVar

from counting import rules
from counting.event import Event

# How long a window is kept from when it opened, in the worker's clock: its own span, then 5 minutes
# / 1 hour / 2 days for the views that come late.
KEEP_MINUTE_MS = 6 * rules.MINUTE_MS
KEEP_HOUR_MS = 2 * rules.HOUR_MS
KEEP_DAY_MS = 3 * rules.DAY_MS
# The rules, bound once: the windows below run them per view.
_minute_of, _hour_of, _day_of = rules.minute_of, rules.hour_of, rules.day_of
_SPAN_MS = rules.VELOCITY_WINDOW_MS - 1
_NEAR = "\x1fnear"
# Up to this many, an address's view times (or agents) are kept in a tuple (see `ViewWindows`).
LONG = 64

K = TypeVar("K")
V = TypeVar("V")


class _Windows(Generic[K, V]):
    """Values by key per window, each dropped once the clock is `keep_ms` past its opening."""

    def __init__(self, keep_ms: int) -> None:
        self._keep_ms = keep_ms
        self._clock = 0
        self._opened: deque[tuple[int, int]] = deque()  # (clock at opening, window), oldest first
        self.counts: dict[int, dict[K, V]] = {}

    def open(self, window: int) -> dict[K, V]:
        """The values of `window`, made when it is new."""
        counter = self.counts.get(window)
        if counter is None:
            counter = self.counts[window] = {}
            self._opened.append((self._clock, window))
        return counter

    def advance(self, clock: int) -> None:
        """Move the clock to `clock` (never back) and drop the windows opened `keep_ms` before it.
        Windows opened before the clock was first set count as opened then."""
        if clock <= self._clock:
            return
        if not self._clock:
            self._opened = deque((clock, window) for _, window in self._opened)
        self._clock = clock
        opened, counts, oldest = self._opened, self.counts, clock - self._keep_ms
        while opened and opened[0][0] < oldest:
            counts.pop(opened.popleft()[1], None)


class ViewWindows:
    """Running window counts of the views one worker has seen (every view, counted or not)."""

    def __init__(self) -> None:
        # Per minute, the times of the views from each address: the time of its one view, or the
        # sorted times in a tuple. Values are numbers, text and tuples of them: the cyclic garbage
        # collector stops tracking such a tuple once it has seen it, where every list, set or array
        # stays tracked, and each of its full collections walks them all (with the state's, they
        # cost the counter a fifth of its CPU). The 60 s up to a view lie in its minute and the one
        # before.
        # An address past `LONG` views a minute (or agents an hour) has them in an array (or a set),
        # which takes one more without copying them all.
        self._address: _Windows[str, int | tuple[int, ...] | array[int]] = _Windows(KEEP_MINUTE_MS)
        # Per hour, each address's agent, or the tuple of them once it has shown two.
        self._agents: _Windows[str, str | tuple[str, ...] | set[str]] = _Windows(KEEP_HOUR_MS)
        # Keyed by the hash of one string (video, separator, viewer): an int kept, not the text (a
        # collision, one in 2^64 a pair, adds two viewers' views up), and a dict of integers is not
        # tracked by the cyclic garbage collector, so its millions of entries cost no scan time.
        self._viewer: _Windows[int, int] = _Windows(KEEP_DAY_MS)
        # Per video and day: its views long enough to count, and its `NEAR` key those near the threshold.
        self._video_day: _Windows[str, int] = _Windows(KEEP_DAY_MS)

    def advance(self, clock: int) -> None:
        """Move the worker's clock to `clock` (the newest ingest time seen; never back) and drop the
        windows opened longer ago than they are kept."""
        for windows in (self._address, self._agents, self._viewer, self._video_day):
            windows.advance(clock)

    def observe(self, event: Event, count: bool = True) -> tuple[int, int, int]:
        """Count a view (unless `count` is false: a copy already counted); return (views from its
        address in the 60 s up to it, views of its video by its viewer in its day, distinct agents
        from its address in its hour), this one included: the window inputs of
        `BotFilter.view_mask`."""
        return self.observe_view(
            event.ip, event.ts, event.video_id, rules.viewer_of(event), count, event.user_agent
        )

    def observe_view(
        self,
        ip: str | None,
        ts: int,
        video_id: str,
        viewer: str,
        count: bool = True,
        agent: str | None = None,
    ) -> tuple[int, int, int]:
        """`observe` from the fields it needs (the counter's hot path has them at hand)."""
        # The windows' updates, inlined: this runs once per view on the counter's hot path.
        address_views = address_agents = 0
        if ip is not None:
            # Views from the address in the 60 s up to `ts`: the minute's times up to it, and those
            # of the minute before from `ts` - 59,999 ms on.
            minute = _minute_of(ts)
            by_minute = self._address.counts
            times_of = by_minute.get(minute) or self._address.open(minute)
            times = times_of.get(ip)
            if times is None:  # the address's first view this minute (most are): its time
                if count:
                    times_of[ip] = ts
                address_views = 1
            elif times.__class__ is int:  # its second: both times, sorted
                if count:
                    times_of[ip] = (times, ts) if times <= ts else (ts, times)
                address_views = (times <= ts) + count or 1
            else:
                at = bisect_right(times, ts)  # type: ignore[arg-type]
                if count:
                    if times.__class__ is not tuple:
                        times.insert(at, ts)  # type: ignore[union-attr]
                    elif len(times) < LONG:
                        times_of[ip] = (*times[:at], ts, *times[at:])
                    else:
                        times_of[ip] = longer = array("q", times)
                        longer.insert(at, ts)
                address_views = at + count or 1
            before = by_minute.get(minute - 1)
            if before is not None and (earlier := before.get(ip)) is not None:
                start = ts - _SPAN_MS
                if earlier.__class__ is int:
                    address_views += earlier >= start
                else:
                    address_views += len(earlier) - bisect_left(earlier, start)  # type: ignore[arg-type]
            # Distinct agents from the address this hour: one agent, or the tuple of them once two.
            hour = _hour_of(ts)
            agents_of = self._agents.counts.get(hour) or self._agents.open(hour)
            seen = agents_of.get(ip)
            if seen is None:
                if agent and count:
                    agents_of[ip] = agent
                address_agents = 1 if agent else 0
            elif seen.__class__ is str:
                if not agent or agent == seen:
                    address_agents = 1
                else:
                    if count:
                        agents_of[ip] = (seen, agent)
                    address_agents = 2
            else:
                if agent and agent not in seen:
                    if count:
                        if seen.__class__ is not tuple:
                            seen.add(agent)  # type: ignore[union-attr]
                            address_agents = -1  # len(seen) below counts it already
                        elif len(seen) < LONG:
                            agents_of[ip] = (*seen, agent)
                        else:
                            agents_of[ip] = {*seen, agent}
                    address_agents += 1
                address_agents += len(seen)
        step = 1 if count else 0
        day = _day_of(ts)
        by_viewer = self._viewer.counts.get(day) or self._viewer.open(day)
        key = hash(f"{video_id}\x1f{viewer}")  # an int kept, not the text
        viewer_views = by_viewer.get(key, 0) + step
        by_viewer[key] = viewer_views
        return address_views, viewer_views if viewer_views > 1 else 1, address_agents

    def observe_qualified(self, ts: int, video_id: str, near: bool, count: bool = True) -> tuple[int, int]:
        """Count a view long enough to count (unless `count` is false: a copy already counted), and
        whether it stopped near the threshold; return (views near the threshold, views long enough)
        of its video in its day, this one included: the inputs of `BotFilter.is_bunched`."""
        step = 1 if count else 0
        day = _day_of(ts)
        counter = self._video_day.counts.get(day) or self._video_day.open(day)
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
            for windows in (self._address, self._agents, self._viewer, self._video_day)
            for c in windows.counts.values()
        )
