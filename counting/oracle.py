"""The plain-Python reference counter: what every layer's counts must equal, as of any cutoff."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from counting import rules
from counting.bots import BotFilter, shipped
from counting.event import Event


@dataclass
class VideoCounts:
    """Exact counts of one video."""

    views: int = 0
    likes: int = 0
    dislikes: int = 0
    unique_viewers: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    short_views: int = 0
    repeat_views: int = 0


def dedup(events: Iterable[Event], cutoff: int | None = None) -> list[Event]:
    """The events that count, once each: ingested before the cutoff, first copy of each event_id."""
    first: dict[str, Event] = {}
    for event in events:
        if cutoff is not None and (event.ingest_ts is None or event.ingest_ts >= cutoff):
            continue
        seen = first.get(event.event_id)
        if seen is None or rules.first_copy_order(event) < rules.first_copy_order(seen):
            first[event.event_id] = event
    return sorted(first.values(), key=rules.first_copy_order)


def reactions(events: Iterable[Event]) -> dict[tuple[str, str], str]:
    """The reaction state of each (user_id, video_id) pair: its latest reaction event by (ts, event_id)."""
    latest: dict[tuple[str, str], Event] = {}
    for event in events:
        if event.type not in rules.REACTION_STATE or event.user_id is None:
            continue
        pair = (event.user_id, event.video_id)
        seen = latest.get(pair)
        if seen is None or rules.reaction_order(event) > rules.reaction_order(seen):
            latest[pair] = event
    return {pair: rules.reaction_state(e.type) for pair, e in latest.items()}


def view_verdicts(events: list[Event], bot_filter: BotFilter | None = None) -> list[tuple[Event, str | None]]:
    """Each deduplicated view with the reason it is not counted as a bot view (None: human). The
    windows are whole: views per address and minute, per video, viewer and day, and the views
    long enough to count per video and day (those stopping near the threshold among them)."""
    bot_filter = bot_filter or shipped()
    views = [e for e in events if e.type == "view"]
    per_address = Counter((e.ip, rules.minute_of(e.ts)) for e in views if e.ip is not None)
    per_viewer = Counter((e.video_id, rules.viewer_of(e), rules.day_of(e.ts)) for e in views)
    qualified = Counter((e.video_id, rules.day_of(e.ts)) for e in views if rules.is_qualified_view(e))
    near = {e.event_id for e in views if bot_filter.is_near_threshold(e.watch_secs, e.video_duration_secs)}
    near_per_day = Counter((e.video_id, rules.day_of(e.ts)) for e in views if e.event_id in near)
    verdicts = []
    for e in views:
        address_views = per_address[(e.ip, rules.minute_of(e.ts))] if e.ip is not None else 0
        viewer_views = per_viewer[(e.video_id, rules.viewer_of(e), rules.day_of(e.ts))]
        video_day = (e.video_id, rules.day_of(e.ts))
        bunched = e.event_id in near and bot_filter.is_bunched(near_per_day[video_day], qualified[video_day])
        found = bot_filter.signals_for(e, address_views, viewer_views, bunched)
        verdicts.append((e, bot_filter.rejection_reason(found)))
    return verdicts


COUNTED = "counted"
SHORT = "short"
REPEAT = "repeat"
REJECTED = "rejected"


def view_outcomes(
    kept: list[Event], bot_filter: BotFilter | None = None
) -> list[tuple[Event, str, str | None]]:
    """Each deduplicated view (in first-copy order) with its outcome — counted, short, repeat or
    rejected — and the reason of a rejection."""
    windows: set[tuple[str, str, int]] = set()
    outcomes: list[tuple[Event, str, str | None]] = []
    for event, reason in view_verdicts(kept, bot_filter):
        if not rules.is_qualified_view(event):
            outcomes.append((event, SHORT, None))
        elif reason is not None:
            outcomes.append((event, REJECTED, reason))
        else:
            window = (event.video_id, rules.viewer_of(event), rules.view_window_of(event.ts))
            outcomes.append((event, REPEAT if window in windows else COUNTED, None))
            windows.add(window)
    return outcomes


def counted_views(
    events: Iterable[Event], cutoff: int | None = None, bot_filter: BotFilter | None = None
) -> list[Event]:
    """The view events that count, one per (video, viewer, window), as of the cutoff."""
    return [e for e, outcome, _ in view_outcomes(dedup(events, cutoff), bot_filter) if outcome == COUNTED]


def count(
    events: Iterable[Event], cutoff: int | None = None, bot_filter: BotFilter | None = None
) -> dict[str, VideoCounts]:
    """Exact per-video counts over the events ingested before `cutoff` (all events if None), with
    the bot rules of `bot_filter` (default: the rules shipped with Tally)."""
    kept = dedup(events, cutoff)
    result: dict[str, VideoCounts] = {}
    viewers: dict[str, set[str]] = {}
    for event, outcome, reason in view_outcomes(kept, bot_filter):
        counts = result.setdefault(event.video_id, VideoCounts())
        if outcome == SHORT:
            counts.short_views += 1
        elif outcome == REJECTED and reason is not None:
            counts.rejected[reason] = counts.rejected.get(reason, 0) + 1
        elif outcome == REPEAT:
            counts.repeat_views += 1
        else:
            counts.views += 1
            viewers.setdefault(event.video_id, set()).add(rules.viewer_of(event))
    for video_id, seen in viewers.items():
        result[video_id].unique_viewers = len(seen)
    for (_, video_id), state in reactions(kept).items():
        counts = result.setdefault(video_id, VideoCounts())
        if state == rules.LIKED:
            counts.likes += 1
        elif state == rules.DISLIKED:
            counts.dislikes += 1
    for event in kept:
        result.setdefault(event.video_id, VideoCounts())
    return result
