"""The first bucket each viewer of a video was counted in, per partition (each bucket's `uniques`
counts the viewers first counted in it): fixed-width rows, never a text key and a dict entry per
viewer (docs/decisions/0007-compact-markers.md).

A row is keyed by a 64-bit fingerprint of (video, viewer digest) and holds the first bucket, the
viewer's digest (`rules.viewer_digest` as a number: what the sink writes, and whose first 32 bits
are the viewer's route, `rules.viewer_route`) and a 64-bit hash of its video. Rows are kept as long
as the partition's state: a viewer seen before stays seen, up to `EXACT_VIEWERS_LIMIT` a video.

A changelog entry, a snapshot chunk or a hand-off carries them as `per_video.Videos` of `RECORD`s
(digest, first bucket, the video's place among the entry's names: 20 bytes)."""

from __future__ import annotations

import numpy as np
from xxhash import xxh64_intdigest

from speed_layer.state.per_video import PerVideoRows, Videos

FIRST = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("digest", "<u8"), ("video", "<u8")])
RECORD = np.dtype([("digest", "<u8"), ("bucket", "<i8"), ("video", "<u4")])


def first_key(video: str, digest: str) -> int:
    """The 64-bit key of a viewer's first bucket in a video (`digest`: its `rules.viewer_digest`)."""
    return xxh64_intdigest(f"{video}\x1f{digest}".encode())


def viewers_in(entry: Videos) -> list[tuple[str, str, int]]:
    """The (video, viewer digest, first bucket) of an entry's records."""
    names, raw = entry
    records = np.frombuffer(raw, RECORD)
    columns = (records["video"].tolist(), records["digest"].tolist(), records["bucket"].tolist())
    return [(names[v], f"{d:016x}", b) for v, d, b in zip(*columns, strict=True)]


def as_entry(firsts: list[tuple[str, str, int]]) -> Videos:
    """(video, viewer digest, first bucket) as an entry carries them."""
    names = sorted({video for video, _, _ in firsts})
    place = {video: n for n, video in enumerate(names)}
    records = np.empty(len(firsts), RECORD)
    records["video"] = [place[video] for video, _, _ in firsts]
    records["digest"] = [int(digest, 16) for _, digest, _ in firsts]
    records["bucket"] = [bucket for _, _, bucket in firsts]
    return names, records.tobytes()


class FirstsTable(PerVideoRows):
    """One partition's first buckets; `viewers_of` counts each video's rows (its exact viewers)."""

    def __init__(self) -> None:
        super().__init__(FIRST, RECORD)
        self.viewers_of: dict[str, int] = {}

    def first(self, fp: int) -> int | None:
        """The first bucket of a key (`first_key`), None if the viewer was not counted."""
        value = self.get(fp)
        return None if value is None else value[0]

    def set(self, fp: int, bucket: int, video: str, digest: str, new: bool) -> None:
        """Set a viewer's first bucket (`new`: the video's viewers count one more)."""
        self._batch[fp] = (bucket, int(digest, 16), self.video_hash(video))
        if new:
            self.viewers_of[video] = self.viewers_of.get(video, 0) + 1

    def _records(self, rows: np.ndarray) -> np.ndarray:
        records = np.empty(rows.size, RECORD)
        records["digest"], records["bucket"] = rows["digest"], rows["ts"]
        return records

    def _rows_of(self, names: list[str], records: np.ndarray) -> np.ndarray:
        rows = np.empty(records.size, FIRST)
        columns = (records["video"].tolist(), records["digest"].tolist())
        rows["fp"] = [first_key(names[v], f"{d:016x}") for v, d in zip(*columns, strict=True)]
        rows["ts"], rows["digest"] = records["bucket"], records["digest"]
        return rows

    def _loading(self, names: list[str], records: np.ndarray, rows: np.ndarray) -> None:
        _, at = self._lookup(rows["fp"])
        new = np.bincount(records["video"][at < 0], minlength=len(names)).tolist()
        for video, n in zip(names, new, strict=True):
            if n:
                self.viewers_of[video] = self.viewers_of.get(video, 0) + n
