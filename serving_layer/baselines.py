"""Keep the published baseline (its per-bucket series and history tiers) in memory; reload on a new
publish."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from counting.batchpaths import CREATOR_VIEWERS_DIR, SERIES_DIR, TIERS
from warehouse.baseline import POINTER, Baseline, current_baseline

# The history tiers a run holds (`batch_layer.series.TIERS`): step (ms) -> folder of the run.
TIER_DIRS: dict[int, str] = {tier.step_ms: tier.dir_name for tier in TIERS}
_COUNTS = ("views", "rejected", "short_views")


@dataclass(frozen=True)
class BucketCounts:
    """Counted, rejected and short views of a video in one bucket."""

    views: int = 0
    rejected: int = 0
    short_views: int = 0


class BaselineCache:
    """The baseline the serving process reads, reloaded when a batch publishes a new one."""

    def __init__(self, baselines_dir: Path, batch_dir: Path | None = None) -> None:
        self._dir = baselines_dir
        self._pointer = str(baselines_dir / POINTER)  # stat once per read: a plain string path
        self._batch_dir = batch_dir
        self._stamp: tuple[int, int] | None = None
        self._baseline: Baseline | None = None
        self._series: dict[str, dict[int, BucketCounts]] | None = None
        self._reach: dict[str, int] | None = None
        # Per step: the earliest step start kept, and the video's counts per step start (None: the
        # run has no such tier).
        self._tiers: dict[int, tuple[int, dict[str, dict[int, BucketCounts]] | None]] = {}

    def get(self) -> Baseline | None:
        try:
            stat = os.stat(self._pointer)
        except FileNotFoundError:
            return self._baseline
        stamp = (stat.st_mtime_ns, stat.st_ino)
        if stamp != self._stamp:
            self._baseline = current_baseline(self._dir)
            self._series = None
            self._reach = None
            self._tiers = {}
            self._stamp = stamp
        return self._baseline

    def series(self, video_id: str) -> dict[int, BucketCounts]:
        """The batch's per-bucket counts of a video (empty before any batch or without series)."""
        baseline = self.get()
        if baseline is None or self._batch_dir is None:
            return {}
        if self._series is None:
            self._series = self._load_series(self._batch_dir / baseline.run_id / SERIES_DIR)
        return self._series.get(video_id, {})

    def tier(self, video_id: str, step_ms: int, since_ms: int = 0) -> dict[int, BucketCounts] | None:
        """The batch's counts of a video per step of a history tier, by step start (ms): at least
        the steps starting at or after `since_ms` (the tier's retention; older steps are not loaded,
        and a later call asking for older ones loads them). Empty before any batch; None when the
        served run has no such tier (made before the tiers were written)."""
        baseline = self.get()
        if baseline is None or self._batch_dir is None:
            return {}
        loaded = self._tiers.get(step_ms)
        if loaded is None or since_ms < loaded[0]:
            path = self._batch_dir / baseline.run_id / TIER_DIRS[step_ms]
            loaded = (since_ms, self._load_tier(path, since_ms) if path.exists() else None)
            self._tiers[step_ms] = loaded
        series = loaded[1]
        return None if series is None else series.get(video_id, {})

    def creator_viewers(self, creator_id: str) -> int | None:
        """The creator's exact unique viewers as of the baseline's cutoff: 0 for a creator without
        counted views, None when no run is published or the run was made without the catalog."""
        baseline = self.get()
        if baseline is None or self._batch_dir is None:
            return None
        if self._reach is None:
            path = self._batch_dir / baseline.run_id / CREATOR_VIEWERS_DIR
            if not path.exists():
                return None
            table = pq.read_table(path).to_pydict()
            self._reach = dict(
                zip(table["creator_id"], (int(n) for n in table["unique_viewers"]), strict=True)
            )
        return self._reach.get(creator_id, 0)

    @staticmethod
    def _load_series(path: Path) -> dict[str, dict[int, BucketCounts]]:
        if not path.exists():
            return {}
        series: dict[str, dict[int, BucketCounts]] = {}
        for row in pq.read_table(path).to_pylist():
            counts = BucketCounts(int(row["views"]), int(row["rejected"]), int(row["short_views"]))
            series.setdefault(row["video_id"], {})[int(row["bucket"])] = counts
        return series

    @staticmethod
    def _load_tier(path: Path, since_ms: int) -> dict[str, dict[int, BucketCounts]]:
        table = pq.read_table(path, filters=[("start_ms", ">=", since_ms)])
        columns = (table[name].to_pylist() for name in ("video_id", "start_ms", *_COUNTS))
        series: dict[str, dict[int, BucketCounts]] = {}
        for video_id, start, views, rejected, short_views in zip(*columns, strict=True):
            series.setdefault(video_id, {})[start] = BucketCounts(views, rejected, short_views)
        return series
