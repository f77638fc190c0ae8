"""Merge the batch baseline with the speed deltas from its cutoff on: the served counts."""

from __future__ import annotations

from dataclasses import dataclass, field

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


def merge(video_id: str, base: BaselineRow | None, speed: SpeedCounts | None) -> Stats:
    """total = baseline(C) + sum(speed buckets >= bucket(C)); either side may be missing."""
    b = base or BaselineRow(video_id)
    s = speed or SpeedCounts()
    rejected = dict(b.rejected)
    for reason, n in s.rejected.items():
        rejected[reason] = rejected.get(reason, 0) + n
    return Stats(
        video_id=video_id,
        views=b.views + s.views,
        likes=b.likes + s.likes,
        dislikes=b.dislikes + s.dislikes,
        unique_viewers=b.unique_viewers + s.uniques,
        watching_now=s.watching_now,
        rejected=rejected,
    )
