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
    flagged: int = 0
    approx: bool = False
    corrected_by_batch: int | None = None


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
        flagged=b.flagged + s.flagged,
        approx=s.approx_uniques,
        corrected_by_batch=corrected_by_batch(base, speed),
    )


def corrected_by_batch(base: BaselineRow | None, speed: SpeedCounts | None) -> int | None:
    """The views the batch took off the speed layer's count of the buckets before its cutoff: the
    speed layer's counted views there less the baseline's (a bot burst the speed layer counted
    while its minute filled, refused by the batch; negative if the batch counted more).

    None when it is not known: no baseline, or no reading of the speed buckets before the cutoff,
    or those buckets do not hold every view the batch judged (expired past the speed retention, lost
    with Redis, or not counted yet by a counter that lags): the views each side judged (counted,
    short, repeated or rejected) differ.
    """
    if base is None or speed is None or speed.before is None:
        return None
    judged = base.views + base.short_views + base.repeat_views + sum(base.rejected.values())
    if speed.before.judged != judged:
        return None
    return speed.before.views - base.views


def _unique_viewers(base: BaselineRow, speed: SpeedCounts) -> int:
    if speed.viewers_estimate is not None:
        return max(base.unique_viewers, speed.viewers_estimate)
    return base.unique_viewers + speed.unique_viewers
