"""The counts of a video: one frozen record that the oracle, the baseline and the serving layer share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The plain counts of a video (every field of `VideoCounts` but the rejected views by reason).
COUNT_FIELDS: tuple[str, ...] = (
    "views",
    "likes",
    "dislikes",
    "unique_viewers",
    "short_views",
    "repeat_views",
    "flagged",
)


@dataclass(frozen=True, kw_only=True)
class VideoCounts:
    """Exact counts of one video: counted views, reactions, the viewers of the counted views, the
    views not counted (rejected by reason, too short, repeated) and the counted views flagged
    (scored in the rules' soft band, a subset of `views`). A subclass adds what its layer keys or
    knows besides (`warehouse.baseline.BaselineRow`: the video id)."""

    views: int = 0
    likes: int = 0
    dislikes: int = 0
    unique_viewers: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    short_views: int = 0
    repeat_views: int = 0
    flagged: int = 0

    def count_fields(self) -> dict[str, int]:
        """The plain counts by name (`COUNT_FIELDS`), without the rejected views."""
        return {name: int(getattr(self, name)) for name in COUNT_FIELDS}


def added_rejected(first: Mapping[str, int], second: Mapping[str, int]) -> dict[str, int]:
    """Rejected views by reason of two sides together (a reason of either side)."""
    total = dict(first)
    for reason, n in second.items():
        total[reason] = total.get(reason, 0) + n
    return total
