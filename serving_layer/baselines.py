"""Keep the published baseline in memory and reload it when the publish pointer changes."""

from __future__ import annotations

from pathlib import Path

from warehouse.baseline import POINTER, Baseline, current_baseline


class BaselineCache:
    """The baseline the serving process reads, reloaded when a batch publishes a new one."""

    def __init__(self, baselines_dir: Path) -> None:
        self._dir = baselines_dir
        self._stamp: tuple[int, int] | None = None
        self._baseline: Baseline | None = None

    def get(self) -> Baseline | None:
        pointer = self._dir / POINTER
        try:
            stat = pointer.stat()
        except FileNotFoundError:
            return self._baseline
        stamp = (stat.st_mtime_ns, stat.st_ino)
        if stamp != self._stamp:
            self._baseline = current_baseline(self._dir)
            self._stamp = stamp
        return self._baseline
