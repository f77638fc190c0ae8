"""Hot videos: each video's velocity (events a second of ingestion time, as this worker sees them) and
the shard count to ask for, so one viral video spreads over partitions and workers.

A video whose velocity passes `hot_video_events_per_sec` has its shard count doubled (at most once a
second, capped at `max_video_shards`); the counter of the video's home partition plans it once and
publishes the plan in `keys.shard_plans()`, which every ingest process reads whole.
"""

from __future__ import annotations

SHARD_TTL_MS = 10 * 60_000
RAISE_EVERY_MS = 1_000
# Velocity is measured over at least this much ingestion time.
WINDOW_MS = 1_000
# Videos with fewer events than threshold / TRACK_DIVISOR in a micro-batch are not tracked.
TRACK_DIVISOR = 50
MAX_TRACKED = 10_000


class HotVideos:
    """Velocity per video and the shard counts this worker asked for."""

    def __init__(self, threshold: int, max_shards: int, ttl_ms: int = SHARD_TTL_MS) -> None:
        self.threshold = threshold
        self.max_shards = max_shards
        self.ttl_ms = ttl_ms
        self._windows: dict[str, list[int]] = {}  # video -> [window start (ingest ms), events]
        self._asked: dict[str, tuple[int, int]] = {}  # video -> (shards asked for, when (ms))
        self.velocity: dict[str, float] = {}  # the last velocity measured of each tracked video

    def observe(self, counts: dict[str, int], newest_ingest_ms: int, now_ms: int) -> dict[str, int]:
        """Add a micro-batch's events per video (newest ingestion time `newest_ingest_ms`); return the
        shard count wanted for each video that is hot now (raised or renewed)."""
        wanted: dict[str, int] = {}
        floor = max(1, self.threshold // TRACK_DIVISOR)
        for video, n in counts.items():
            window = self._windows.get(video)
            if window is None:
                if n < floor:
                    continue
                window = self._windows[video] = [newest_ingest_ms, 0]
            window[1] += n
            elapsed = newest_ingest_ms - window[0]
            if elapsed < WINDOW_MS:
                continue
            rate = window[1] * 1000.0 / elapsed
            self.velocity[video] = rate
            window[0], window[1] = newest_ingest_ms, 0
            asked, at = self._asked.get(video, (1, 0))
            if rate > self.threshold:
                if asked < self.max_shards and now_ms - at >= RAISE_EVERY_MS:
                    asked = min(self.max_shards, asked * 2)
                    self._asked[video] = (asked, now_ms)
                wanted[video] = asked
            elif asked > 1 and rate > self.threshold / 2:
                wanted[video] = asked
        if len(self._windows) > MAX_TRACKED:
            self._forget(newest_ingest_ms)
        return wanted

    def _forget(self, newest_ingest_ms: int) -> None:
        stale = [v for v, w in self._windows.items() if newest_ingest_ms - w[0] > 60 * WINDOW_MS]
        for video in stale:
            del self._windows[video]
            self.velocity.pop(video, None)
            self._asked.pop(video, None)
