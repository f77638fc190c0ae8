"""Merge the batch baseline with the speed deltas from its cutoff on: the served counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from counting.counts import added_rejected
from serving_layer.speed import SpeedCounts
from warehouse.baseline import BaselineRow


@dataclass
class Stats:
    """What the stats route answers for one video."""

    video_id: str
    views: int
    likes: int
    dislikes: int
    unique_viewers: int
    watching_now: int
    rejected: dict[str, int] = field(default_factory=dict)
    approx: bool = False


def merge(video_id: str, base: BaselineRow | None, speed: SpeedCounts | None) -> Stats:
    """total = baseline(C) + sum(speed buckets >= bucket(C)); either side may be missing.

    Unique viewers: while the speed layer keeps an exact viewer set, each bucket counts the viewers
    first seen in it, so the baseline's exact figure plus the buckets from C on counts a viewer
    seen on both sides once. A video past the exact limit has an all-time HyperLogLog of its viewers
    instead, which already holds the viewers before C: its estimate is the answer (approx), never
    below the baseline's exact count.
    """
    b = base or BaselineRow(video_id)
    s = speed or SpeedCounts()
    return Stats(
        video_id=video_id,
        views=b.views + s.views,
        likes=b.likes + s.likes,
        dislikes=b.dislikes + s.dislikes,
        unique_viewers=_unique_viewers(b, s),
        watching_now=s.watching_now,
        rejected=added_rejected(b.rejected, s.rejected),
        approx=s.approx_uniques,
    )


def _unique_viewers(base: BaselineRow, speed: SpeedCounts) -> int:
    if speed.viewers_estimate is not None:
        return max(base.unique_viewers, speed.viewers_estimate)
    return base.unique_viewers + speed.unique_viewers
