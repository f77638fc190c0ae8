"""What is trending: a video's place by counted views over recent buckets, and the videos rising
fastest against their own recent past. Defined here on per-bucket counted views, whoever counted
them: the oracle (`bucket_views` of the events) or the speed layer (its per-bucket trending sets).

Velocity: the views per minute of the recent window (the last `window_buckets` buckets, the current
one counted up to now) against the video's baseline, its views per minute over the
`baseline_buckets` buckets before. `rise` = (recent + s) / (baseline + s), with a smoothing `s` of
SMOOTHING_PER_MINUTE views a minute, so a video going from 0 to 2 views does not outrank one
going from 1,000 to 5,000 a minute. Ranked by rise, then recent views a minute, then video id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from counting import oracle, rules
from counting.bots import BotFilter
from counting.event import Event

SMOOTHING_PER_MINUTE = 0.1  # six views an hour
DEFAULT_BASELINE_BUCKETS = 6


def bucket_views(
    events: Iterable[Event], bucket_ms: int, bot_filter: BotFilter | None = None
) -> dict[str, dict[int, int]]:
    """Counted views per video and bucket of ingestion time: what the oracle says each speed bucket
    holds."""
    per: dict[str, dict[int, int]] = {}
    for event in oracle.counted_views(events, bot_filter=bot_filter):
        buckets = per.setdefault(event.video_id, {})
        bucket = rules.bucket_of(event.ingest_ts or 0, bucket_ms)
        buckets[bucket] = buckets.get(bucket, 0) + 1
    return per


def window_views(per_bucket: Mapping[str, Mapping[int, int]], first: int, last: int) -> dict[str, int]:
    """Each video's views in buckets first..last (inclusive); videos without any are left out."""
    totals = {
        video: sum(n for bucket, n in buckets.items() if first <= bucket <= last)
        for video, buckets in per_bucket.items()
    }
    return {video: n for video, n in totals.items() if n > 0}


def ranking(views: Mapping[str, int]) -> list[tuple[str, int]]:
    """Videos by views, most first, ties by video id."""
    return sorted(views.items(), key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class Place:
    """A video's place among the videos with views in a window: `rank` from 1, None without views."""

    views: int
    rank: int | None
    of: int


def place_of(video_id: str, views: Mapping[str, int]) -> Place:
    """Where `video_id` stands in `ranking(views)`."""
    mine = views.get(video_id, 0)
    if mine <= 0:
        return Place(0, None, len(views))
    ahead = sum(1 for video, n in views.items() if n > mine or (n == mine and video < video_id))
    return Place(mine, ahead + 1, len(views))


class Standings:
    """Every video's place in one window's `ranking`, made once and then asked of any video (what
    `place_of` answers, without going over every video again)."""

    __slots__ = ("_ranks", "_views")

    def __init__(self, views: Mapping[str, int]) -> None:
        self._views = dict(views)
        self._ranks = {video: at for at, (video, _) in enumerate(ranking(self._views), 1)}

    def place(self, video_id: str) -> Place:
        mine = self._views.get(video_id, 0)
        if mine <= 0:
            return Place(0, None, len(self._views))
        return Place(mine, self._ranks[video_id], len(self._views))


@dataclass(frozen=True)
class Velocity:
    """A video's recent views a minute against its baseline's, and the rise."""

    video_id: str
    recent_views: int
    views_per_minute: float
    baseline_per_minute: float
    rise: float


def windows(
    now_ms: int, bucket_ms: int, window_buckets: int, baseline_buckets: int
) -> tuple[int, int, int, int]:
    """(first recent bucket, last recent bucket, first baseline bucket, last baseline bucket)."""
    last = rules.bucket_of(now_ms, bucket_ms)
    first = last - window_buckets + 1
    return first, last, first - baseline_buckets, first - 1


def velocities(
    recent: Mapping[str, int],
    baseline: Mapping[str, int],
    now_ms: int,
    bucket_ms: int,
    window_buckets: int,
    baseline_buckets: int,
) -> list[Velocity]:
    """The videos with recent views, fastest rising first: `recent` and `baseline` are each video's
    views in the two windows of `windows(now_ms, ...)`."""
    first, _, _, _ = windows(now_ms, bucket_ms, window_buckets, baseline_buckets)
    recent_minutes = max(now_ms - rules.bucket_start(first, bucket_ms) + 1, 1) / rules.MINUTE_MS
    baseline_minutes = baseline_buckets * bucket_ms / rules.MINUTE_MS
    found = []
    for video, n in recent.items():
        per_minute = n / recent_minutes
        before = baseline.get(video, 0) / baseline_minutes
        rise = (per_minute + SMOOTHING_PER_MINUTE) / (before + SMOOTHING_PER_MINUTE)
        found.append(Velocity(video, n, per_minute, before, rise))
    found.sort(key=lambda v: (-v.rise, -v.views_per_minute, v.video_id))
    return found
