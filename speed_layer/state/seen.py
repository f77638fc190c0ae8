"""The markers of the events one partition applied within the retry horizon: fixed-width rows, never
Python objects per event (docs/design.md, "Speed layer"; docs/decisions/0007-compact-markers.md).

A marker is keyed by a 64-bit fingerprint of (video, event id), which Spark's `xxhash64` computes
too, and holds the applied copy's ingest time, its verdict's code (`judge.VERDICT_CODE`), its
viewer's route (`rules.viewer_route`) and a 24-bit tag of its video (what a hot video's hand-off
selects by). They are a `rows.RowTable`: slabs by ingest time, a micro-batch looked up and written at
once; a changelog entry, a snapshot or a hand-off carries them as `ROW` records (24 bytes)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from xxhash import xxh32_intdigest, xxh64_intdigest

from speed_layer.state.rows import RowTable

ROW = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("route", "<u4"), ("tag", "<u4")])


# An applied copy: its ingest time, its verdict's code, its viewer's route, its video's tag (a plain
# tuple: one is made per event).
Marker = tuple[int, int, int, int]


# Spark's `xxhash64` is XXH64 with this seed: the batch layer gets the same fingerprint as
# `xxhash64(concat_ws('\x1f', video_id, event_id))` (a signed long there).
SPARK_SEED = 42


def fingerprint(video: str, event_id: str) -> int:
    """The 64-bit key of an event's marker: XXH64 of `video \x1f event_id`, as Spark computes it."""
    return xxh64_intdigest(f"{video}\x1f{event_id}".encode(), seed=SPARK_SEED)


def video_tag(video: str) -> int:
    """A video's 24-bit tag: the markers a hot video's hand-off selects (another video's markers
    with the same tag go along: a marker elsewhere only makes that partition's deduplication longer)."""
    return xxh32_intdigest(video.encode()) >> 8


class SeenTable(RowTable):
    """One partition's markers (`get` answers a `Marker`, `put` takes its fields)."""

    def __init__(self, horizon_ms: int) -> None:
        super().__init__(ROW, horizon_ms)

    def _values(self, rows: np.ndarray) -> list[tuple[int, ...]]:
        return [(ts, tag & 0xFF, route, tag >> 8) for _, ts, route, tag in rows.tolist()]

    def _rows(self, fps: np.ndarray, values: list[tuple[int, ...]]) -> np.ndarray:
        rows = np.empty(fps.size, ROW)
        rows["fp"] = fps
        matrix = np.array(values, np.int64).reshape(fps.size, 4)  # one conversion of the batch
        rows["ts"], rows["route"], rows["tag"] = (
            matrix[:, 0],
            matrix[:, 2],
            (matrix[:, 3] << 8) | matrix[:, 1],
        )
        return rows

    def put(self, fp: int, ts: int, code: int, route: int, video: int) -> None:  # type: ignore[override]
        self._batch[fp] = (ts, code, route, video)

    def of_video(self, tag: int) -> np.ndarray:
        """The markers whose video has this tag (`video_tag`), as `ROW` records."""
        return self.rows("tag", tag, shift=8)

    def markers(self) -> Iterable[tuple[int, Marker]]:
        """Every (fingerprint, marker), for tests and reports."""
        return self.items()
