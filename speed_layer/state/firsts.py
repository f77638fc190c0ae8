"""The first bucket each viewer of a video was counted in, per partition (each bucket's `uniques`
counts the viewers first counted in it): fixed-width rows of a `rows.RowTable`, never a text key
and a dict entry per viewer (docs/decisions/0007-compact-markers.md).

A row is keyed by a 64-bit fingerprint of (video, viewer digest) and holds the first bucket, the
viewer's digest (`rules.viewer_digest` as a number: what the sink writes, and whose first 32 bits
are the viewer's route, `rules.viewer_route`) and a 64-bit hash of its video (what groups the rows
by video for the changelog and selects a hot video's for its hand-off). Rows are kept as long as
the partition's state: a viewer seen before stays seen, up to `EXACT_VIEWERS_LIMIT` a video.

A changelog entry, a snapshot chunk or a hand-off carries them per video, as `RECORD`s (digest,
first bucket: 16 bytes), the video's name once beside them."""

from __future__ import annotations

import numpy as np
from xxhash import xxh64_intdigest

from speed_layer.state.rows import RowTable

FIRST = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("digest", "<u8"), ("video", "<u8")])
RECORD = np.dtype([("digest", "<u8"), ("bucket", "<i8")])
# The rows are never trimmed: one slab holds them all (a slab spans a quarter of this).
_NEVER = 1 << 62


def first_key(video: str, digest: str) -> int:
    """The 64-bit key of a viewer's first bucket in a video (`digest`: its `rules.viewer_digest`)."""
    return xxh64_intdigest(f"{video}\x1f{digest}".encode())


def viewers_in(raw: bytes) -> list[tuple[str, int]]:
    """The (viewer digest, first bucket) pairs of a video's `RECORD`s."""
    records = np.frombuffer(raw, RECORD)
    digests, buckets = records["digest"].tolist(), records["bucket"].tolist()
    return [(f"{d:016x}", b) for d, b in zip(digests, buckets, strict=True)]


def records_of(rows: np.ndarray) -> np.ndarray:
    """`FIRST` rows as `RECORD`s."""
    records = np.empty(rows.size, RECORD)
    records["digest"], records["bucket"] = rows["digest"], rows["ts"]
    return records


def pairs_as_records(pairs: list[tuple[str, int]]) -> bytes:
    """A video's (viewer digest, first bucket) pairs as `RECORD`s."""
    records = np.empty(len(pairs), RECORD)
    records["digest"] = [int(digest, 16) for digest, _ in pairs]
    records["bucket"] = [bucket for _, bucket in pairs]
    return records.tobytes()


class FirstsTable(RowTable):
    """One partition's first buckets; `viewers_of` counts each video's rows (its exact viewers)."""

    def __init__(self) -> None:
        super().__init__(FIRST, _NEVER)
        self.viewers_of: dict[str, int] = {}
        self._hashes: dict[str, int] = {}  # video -> its 64-bit hash
        self._names: dict[int, str] = {}  # and back

    def _hash(self, video: str) -> int:
        found = self._hashes.get(video)
        if found is None:
            found = self._hashes[video] = xxh64_intdigest(video.encode())
            self._names[found] = video
        return found

    def first(self, fp: int) -> int | None:
        """The first bucket of a key (`first_key`), None if the viewer was not counted."""
        value = self.get(fp)
        return None if value is None else value[0]

    def set(self, fp: int, bucket: int, video: str, digest: str, new: bool) -> None:
        """Set a viewer's first bucket (`new`: the video's viewers count one more)."""
        self._batch[fp] = (bucket, int(digest, 16), self._hash(video))
        if new:
            self.viewers_of[video] = self.viewers_of.get(video, 0) + 1

    def of_video(self, video: str) -> np.ndarray:
        """The rows of a video, as `FIRST` records."""
        return self.rows("video", self._hash(video))

    def entry_of(self, rows: np.ndarray) -> dict[str, bytes]:  # type: ignore[override]
        """Rows as a changelog entry, a snapshot chunk or a hand-off carries them: per video, its
        `RECORD`s."""
        if not rows.size:
            return {}
        rows = rows[np.argsort(rows["video"], kind="stable")]
        records = records_of(rows)
        hashes, starts = np.unique(rows["video"], return_index=True)
        stops = [*starts[1:].tolist(), rows.size]
        names = self._names
        return {
            names[h]: records[start:stop].tobytes()
            for h, start, stop in zip(hashes.tolist(), starts.tolist(), stops, strict=True)
        }

    def take_changes(self) -> dict[str, bytes]:  # type: ignore[override]
        """The rows set since the last call (the last value of each key), per video."""
        self.flush()
        changed, self._changed = self._changed, []
        if not changed:
            return {}
        rows = np.concatenate(changed)[::-1]
        _, last = np.unique(rows["fp"], return_index=True)
        return self.entry_of(rows[last])

    def load(self, entry: dict[str, bytes], changed: bool = False) -> None:  # type: ignore[override]
        """Upsert the `RECORD`s of each video (a changelog entry's, a snapshot chunk's, a hand-off's:
        each viewer once); `changed`: they go to the next changes too (a hand-off taken over)."""
        self.flush()
        parts = []
        for video, raw in entry.items():
            records = np.frombuffer(raw, RECORD)
            rows = np.empty(records.size, FIRST)
            rows["fp"] = [first_key(video, f"{d:016x}") for d in records["digest"].tolist()]
            rows["ts"], rows["digest"] = records["bucket"], records["digest"]
            rows["video"] = self._hash(video)
            _, at = self._lookup(rows["fp"])
            self.viewers_of[video] = self.viewers_of.get(video, 0) + int(np.count_nonzero(at < 0))
            parts.append(rows)
        if not parts:
            return
        rows = np.concatenate(parts)
        self._upsert(rows)
        self._fetched = {}  # what it found before may be set now
        if changed:
            self._changed.append(rows)
