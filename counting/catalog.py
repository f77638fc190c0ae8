"""The video catalog of generated traffic: videos, their creators, durations and Zipf popularity."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

SHORTS_SHARE = 0.06
MONETIZED_SHARE = 0.65
_MEDIAN_DURATION_SECS = 240.0
_DURATION_SIGMA = 0.9
_MIN_DURATION_SECS = 15.0
_MAX_DURATION_SECS = 3 * 3600.0


class CatalogRow(NamedTuple):
    """One video as the relational store keeps it."""

    video_id: str
    creator_id: str
    duration_secs: float
    monetized: bool


@dataclass(frozen=True)
class Catalog:
    """The videos, most popular first (`v0001` is rank 1), and the cumulative Zipf weights."""

    rows: tuple[CatalogRow, ...]
    cumulative: tuple[float, ...]

    def pick(self, u: float) -> int:
        """The index of the video a uniform draw `u` in [0, 1) lands on, by popularity."""
        index = bisect.bisect_right(self.cumulative, u * self.cumulative[-1])
        return min(index, len(self.rows) - 1)

    def share(self, index: int) -> float:
        """The expected share of picks of one video."""
        low = self.cumulative[index - 1] if index else 0.0
        return (self.cumulative[index] - low) / self.cumulative[-1]


def video_id_of(index: int, videos: int) -> str:
    """`v0001`, `v0002`, ... (wider when the catalog has more than 9999 videos)."""
    return f"v{index + 1:0{max(4, len(str(videos)))}d}"


def make_catalog(seed: int, videos: int, creators: int = 0, zipf_exponent: float = 1.1) -> Catalog:
    """A deterministic catalog of `videos` videos by `creators` creators (default: one per 5 videos)."""
    if videos < 1:
        raise ValueError(f"a catalog needs at least one video (got {videos})")
    creators = creators or max(1, videos // 5)
    rng = np.random.default_rng([seed, 0xCA7A])
    durations = np.exp(rng.normal(np.log(_MEDIAN_DURATION_SECS), _DURATION_SIGMA, videos))
    durations = np.clip(durations, _MIN_DURATION_SECS, _MAX_DURATION_SECS)
    shorts = rng.random(videos) < SHORTS_SHARE
    durations = np.where(shorts, rng.uniform(10.0, 59.0, videos), durations).round(1)
    monetized = rng.random(videos) < MONETIZED_SHARE
    owners = rng.integers(0, creators, videos)
    width = max(3, len(str(creators)))
    rows = tuple(
        CatalogRow(video_id_of(i, videos), f"c{owner + 1:0{width}d}", float(duration), bool(paid))
        for i, (owner, duration, paid) in enumerate(zip(owners, durations, monetized, strict=True))
    )
    weights = np.arange(1, videos + 1, dtype=np.float64) ** -zipf_exponent
    return Catalog(rows=rows, cumulative=tuple(np.cumsum(weights).tolist()))
