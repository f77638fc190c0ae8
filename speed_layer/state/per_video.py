"""A table of fixed-width rows that the sink reads per video (`rows.RowTable` with a `video` column
holding a 63-bit hash of the video): a changelog entry, a snapshot chunk or a hand-off carries the
rows as `Videos`, the names of their videos once and the rows' records, each with its video's
place among those names; never a name in a row.

A subclass names its `record` (what an entry carries of a row, with a `video` field: u32) and maps
records to rows (`_rows_of`) and back (`_records`); the rows are never trimmed by slab (one slab
holds them)."""

from __future__ import annotations

import numpy as np
from xxhash import xxh64_intdigest

from speed_layer.state.rows import RowTable

# The rows are never trimmed by slab: one slab holds them all (a slab spans a quarter of this).
NEVER = 1 << 62

# Rows as an entry carries them: their videos' names, and their records (each record's `video`: the
# place of its video's name).
Videos = tuple[list[str], bytes]
NO_ROWS: Videos = ([], b"")


class PerVideoRows(RowTable):
    """Rows of `dtype` (with a `video` column) carried as `Videos` of `record` records."""

    def __init__(self, dtype: np.dtype, record: np.dtype) -> None:
        super().__init__(dtype, NEVER)
        self.record = record
        self._hashes: dict[str, int] = {}  # video -> its hash
        self._names: dict[int, str] = {}  # and back

    def video_hash(self, video: str) -> int:
        """The `video` column's value of a video."""
        found = self._hashes.get(video)
        if found is None:
            found = self._hashes[video] = xxh64_intdigest(video.encode()) >> 1  # fits a signed column
            self._names[found] = video
        return found

    def _records(self, rows: np.ndarray) -> np.ndarray:
        """Rows as their `record`s (but the `video` field)."""
        raise NotImplementedError

    def _rows_of(self, names: list[str], records: np.ndarray) -> np.ndarray:
        """Records as rows (but the `video` column)."""
        raise NotImplementedError

    def of_video(self, video: str) -> np.ndarray:
        """The rows of a video."""
        return self.rows("video", self.video_hash(video))

    def entry_of(self, rows: np.ndarray) -> Videos:  # type: ignore[override]
        """Rows as a changelog entry, a snapshot chunk or a hand-off carries them."""
        if not rows.size:
            return NO_ROWS
        hashes, places = np.unique(rows["video"], return_inverse=True)
        records = self._records(rows)
        records["video"] = places
        names = self._names
        return [names[h] for h in hashes.tolist()], records.tobytes()

    def take_changes(self) -> Videos:  # type: ignore[override]
        """The rows set since the last call (the last value of each key)."""
        self.flush()
        changed, self._changed = self._changed, []
        if not changed:
            return NO_ROWS
        if len(changed) == 1:  # one flush: each key once
            return self.entry_of(changed[0])
        rows = np.concatenate(changed)[::-1]
        _, last = np.unique(rows["fp"], return_index=True)
        return self.entry_of(rows[last])

    def load(self, entry: Videos, changed: bool = False) -> None:  # type: ignore[override]
        """Upsert the rows of an entry (a changelog entry's, a snapshot chunk's, a hand-off's: each
        key once); `changed`: they go to the next changes too (a hand-off taken over)."""
        names, raw = entry
        if not raw:
            return
        self.flush()
        records = np.frombuffer(raw, self.record)
        rows = self._rows_of(names, records)
        hashes = np.fromiter(map(self.video_hash, names), np.uint64, len(names))
        rows["video"] = hashes[records["video"]]
        self._loading(names, records, rows)
        self._upsert(rows)
        self._fetched = {}  # what it found before may be set now
        if changed:
            self._changed.append(rows)

    def _loading(self, names: list[str], records: np.ndarray, rows: np.ndarray) -> None:
        """Rows about to be upserted (a subclass keeps what it derives from them)."""

    def reset(self, rows: np.ndarray) -> None:
        """Hold exactly these rows (some of `rows()`: a trim that is not by slab scans them)."""
        self.flush()
        self._slabs = {}
        self._fetched = {}
        self._upsert(rows)
