"""The plain-Python reference counter: what every layer's counts must equal, as of any cutoff."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from counting import rules
from counting.botfilter import BotFilter
from counting.bots import shipped
from counting.counts import VideoCounts
from counting.event import Event

__all__ = [
    "COUNTED",
    "REJECTED",
    "REPEAT",
    "SHORT",
    "CreatorCounts",
    "Judged",
    "VideoCounts",
    "address_windows",
    "count",
    "counted_views",
    "creator_counts",
    "dedup",
    "judged_views",
    "milestones",
    "reactions",
    "view_masks",
    "view_outcomes",
    "view_verdicts",
    "watching_now",
]


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


def address_windows(views: list[Event]) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """The two address windows of views: per view (by event id) the most views from its address in
    any 60 s of event time that hold it (`rules.VELOCITY_WINDOW_MS`, ends included), and per
    (address, hour) the distinct user agents seen (a missing agent is none)."""
    times: dict[str, list[int]] = defaultdict(list)
    agents: dict[tuple[str, int], set[str]] = defaultdict(set)
    for e in views:
        if e.ip is not None:
            times[e.ip].append(e.ts)
            if e.user_agent:
                agents[(e.ip, rules.hour_of(e.ts))].add(e.user_agent)
    busiest: dict[tuple[str, int], int] = {}
    for ip, series in times.items():
        series.sort()
        # The busiest 60 s holding a view end at a view at or after it: count each view's 60 s up to it.
        ending = [i + 1 - bisect_left(series, rules.velocity_window_start(ts)) for i, ts in enumerate(series)]
        for ts in series:
            last = bisect_right(series, ts + rules.VELOCITY_WINDOW_MS - 1)
            busiest[(ip, ts)] = max(ending[bisect_left(series, ts) : last])
    velocity = {e.event_id: busiest[(e.ip, e.ts)] for e in views if e.ip is not None}
    return velocity, {key: len(seen) for key, seen in agents.items()}


def view_masks(events: list[Event], bot_filter: BotFilter | None = None) -> list[tuple[Event, int]]:
    """Each deduplicated view with its signal mask (`counting.bots.MASK_ORDER`). The windows are
    whole: views per address in the busiest 60 s holding each view, distinct agents per address
    and hour, views per video, viewer and day, and the views long enough to count per video and
    day (those stopping near the threshold among them)."""
    bot_filter = bot_filter or shipped()
    views = [e for e in events if e.type == "view"]
    velocity, agents = address_windows(views)
    per_viewer = Counter((e.video_id, rules.viewer_of(e), rules.day_of(e.ts)) for e in views)
    # Threshold bunching weighs the views long enough to count that no static signal rejects.
    weighed = [
        e
        for e in views
        if rules.is_qualified_view(e)
        and not bot_filter.is_static_reject(
            bot_filter.client_mask(e.user_agent, e.ip, e.ja3), e.watch_secs, e.video_duration_secs
        )
    ]
    qualified = Counter((e.video_id, rules.day_of(e.ts)) for e in weighed)
    near = {e.event_id for e in views if bot_filter.is_near_threshold(e.watch_secs, e.video_duration_secs)}
    near_per_day = Counter((e.video_id, rules.day_of(e.ts)) for e in weighed if e.event_id in near)
    masks = []
    for e in views:
        address_views = velocity.get(e.event_id, 0)
        address_agents = agents.get((e.ip, rules.hour_of(e.ts)), 0) if e.ip is not None else 0
        viewer_views = per_viewer[(e.video_id, rules.viewer_of(e), rules.day_of(e.ts))]
        video_day = (e.video_id, rules.day_of(e.ts))
        bunched = e.event_id in near and bot_filter.is_bunched(near_per_day[video_day], qualified[video_day])
        masks.append((e, bot_filter.mask_for(e, address_views, viewer_views, bunched, address_agents)))
    return masks


def view_verdicts(events: list[Event], bot_filter: BotFilter | None = None) -> list[tuple[Event, str | None]]:
    """Each deduplicated view with the reason it is not counted as a bot view (None: human)."""
    bot_filter = bot_filter or shipped()
    return [(e, bot_filter.rejection_by_mask[mask]) for e, mask in view_masks(events, bot_filter)]


COUNTED = "counted"
SHORT = "short"
REPEAT = "repeat"
REJECTED = "rejected"


class Judged(NamedTuple):
    """A deduplicated view's outcome, the reason of a rejection, its signal mask and whether it
    is flagged (counted, with a score in the soft band)."""

    event: Event
    outcome: str
    reason: str | None
    mask: int
    flagged: bool


def judged_views(kept: list[Event], bot_filter: BotFilter | None = None) -> list[Judged]:
    """Each deduplicated view (in first-copy order) judged: counted, short, repeat or rejected."""
    bot_filter = bot_filter or shipped()
    windows: set[tuple[str, str, int]] = set()
    judged: list[Judged] = []
    for event, mask in view_masks(kept, bot_filter):
        reason = bot_filter.rejection_by_mask[mask]
        if not rules.is_qualified_view(event):
            judged.append(Judged(event, SHORT, None, mask, False))
        elif reason is not None:
            judged.append(Judged(event, REJECTED, reason, mask, False))
        else:
            window = (event.video_id, rules.viewer_of(event), rules.view_window_of(event.ts))
            if window in windows:
                judged.append(Judged(event, REPEAT, None, mask, False))
            else:
                judged.append(Judged(event, COUNTED, None, mask, bot_filter.flagged_by_mask[mask]))
            windows.add(window)
    return judged


def view_outcomes(
    kept: list[Event], bot_filter: BotFilter | None = None
) -> list[tuple[Event, str, str | None]]:
    """Each deduplicated view (in first-copy order) with its outcome — counted, short, repeat or
    rejected — and the reason of a rejection."""
    return [(j.event, j.outcome, j.reason) for j in judged_views(kept, bot_filter)]


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
    tallies: dict[str, Counter[str]] = defaultdict(Counter)
    rejected: dict[str, dict[str, int]] = defaultdict(dict)
    viewers: dict[str, set[str]] = defaultdict(set)
    for event, outcome, reason, _, flagged in judged_views(kept, bot_filter):
        tally = tallies[event.video_id]
        tally["flagged"] += flagged
        if outcome == SHORT:
            tally["short_views"] += 1
        elif outcome == REJECTED and reason is not None:
            of_video = rejected[event.video_id]
            of_video[reason] = of_video.get(reason, 0) + 1
        elif outcome == REPEAT:
            tally["repeat_views"] += 1
        else:
            tally["views"] += 1
            viewers[event.video_id].add(rules.viewer_of(event))
    for (_, video_id), state in reactions(kept).items():
        if state == rules.LIKED:
            tallies[video_id]["likes"] += 1
        elif state == rules.DISLIKED:
            tallies[video_id]["dislikes"] += 1
    videos = dict.fromkeys([*tallies, *(event.video_id for event in kept)])
    return {
        video_id: _video_counts(tallies[video_id], viewers[video_id], rejected[video_id])
        for video_id in videos
    }


def _video_counts(tally: Counter[str], viewers: set[str], rejected: dict[str, int]) -> VideoCounts:
    return VideoCounts(
        views=tally["views"],
        likes=tally["likes"],
        dislikes=tally["dislikes"],
        unique_viewers=len(viewers),
        rejected=rejected,
        short_views=tally["short_views"],
        repeat_views=tally["repeat_views"],
        flagged=tally["flagged"],
    )


@dataclass
class CreatorCounts:
    """Exact counts of a creator's videos together: the sums of their counts, and the viewers of
    any of them counted once (a creator's reach)."""

    views: int = 0
    likes: int = 0
    dislikes: int = 0
    unique_viewers: int = 0


def creator_counts(
    events: Iterable[Event],
    creators: Mapping[str, str],
    cutoff: int | None = None,
    bot_filter: BotFilter | None = None,
) -> dict[str, CreatorCounts]:
    """Per creator of `creators` (video id -> creator id), as of the cutoff; videos of no creator
    are left out."""
    kept = list(events)
    result: dict[str, CreatorCounts] = {}
    for video_id, counts in count(kept, cutoff, bot_filter).items():
        creator = creators.get(video_id)
        if creator is None:
            continue
        total = result.setdefault(creator, CreatorCounts())
        total.views += counts.views
        total.likes += counts.likes
        total.dislikes += counts.dislikes
    viewers: dict[str, set[str]] = defaultdict(set)
    for event in counted_views(kept, cutoff, bot_filter):
        creator = creators.get(event.video_id)
        if creator is not None:
            viewers[creator].add(rules.viewer_of(event))
    for creator, seen in viewers.items():
        result[creator].unique_viewers = len(seen)
    return result


def watching_now(events: Iterable[Event], now_ms: int) -> dict[str, int]:
    """Per video, the sessions watching at `now_ms` (`rules.is_watching`), from the heartbeats and
    leaves in any order; videos with none are left out."""
    beats: dict[tuple[str, str], int] = {}
    leaves: dict[tuple[str, str], int] = {}
    for event in events:
        if event.session_id is None or event.type not in ("heartbeat", "leave"):
            continue
        latest = beats if event.type == "heartbeat" else leaves
        pair = (event.video_id, event.session_id)
        latest[pair] = max(latest.get(pair, -1), event.ingest_ts or 0)
    watching: dict[str, int] = defaultdict(int)
    for (video_id, session), beat in beats.items():
        if rules.is_watching(beat, leaves.get((video_id, session)), now_ms):
            watching[video_id] += 1
    return dict(watching)


def milestones(
    events: Iterable[Event], cutoffs: Iterable[int], steps: Iterable[int], bot_filter: BotFilter | None = None
) -> set[tuple[str, int]]:
    """The (video, step) pairs reached by the baselines published at `cutoffs` (`counting.milestones`)."""
    kept = list(events)
    ladder = sorted(steps)
    found: set[tuple[str, int]] = set()
    for cutoff in cutoffs:
        for video_id, counts in count(kept, cutoff, bot_filter).items():
            found.update((video_id, step) for step in ladder if counts.views >= step)
    return found
