"""The markers of the events one partition applied within the retry horizon: fixed-width rows, never
Python objects per event (docs/design.md, "Speed layer"; docs/decisions/0007-compact-markers.md).

A marker is keyed by a 64-bit fingerprint of (video, event id), which Spark's `xxhash64` computes
too, and holds the applied copy's ingest time, its verdict's code (`judge.VERDICT_CODE`), its
viewer's route (`rules.viewer_route`) and a 24-bit tag of its video (what a hot video's hand-off
selects by). Rows live in slabs by ingest time (a quarter of the horizon each), each an
open-addressing index over columns, so a trim drops whole slabs and never scans. A micro-batch is
looked up at once (`fetch`: one compiled probe a slab) and its markers written at once (`flush`); a
changelog entry, a snapshot or a hand-off carries them as `ROW` records (24 bytes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numba import njit
from xxhash import xxh32_intdigest, xxh64_intdigest

ROW = np.dtype([("fp", "<u8"), ("ts", "<i8"), ("route", "<u4"), ("tag", "<u4")])
_FIRST_CAPACITY = 1 << 10
_UNFETCHED = object()


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


@njit(cache=True, nogil=True)
def _place(index: np.ndarray, fps: np.ndarray, start: int, stop: int) -> None:  # pragma: no cover
    """Put rows start..stop-1 into the index (row + 1 in a free slot; 0 is free)."""
    mask = np.uint64(index.size - 1)
    one = np.uint64(1)
    for row in range(start, stop):
        slot = fps[row] & mask
        while index[slot] != 0:
            slot = (slot + one) & mask
        index[slot] = row + 1


@njit(cache=True, nogil=True)
def _find(
    index: np.ndarray, fps: np.ndarray, keys: np.ndarray, rows: np.ndarray, slabs: np.ndarray, slab: int
) -> None:  # pragma: no cover
    """For each key not found yet (rows[k] < 0), its row in this slab, if there."""
    mask = np.uint64(index.size - 1)
    one = np.uint64(1)
    for k in range(keys.size):
        if rows[k] >= 0:
            continue
        key = keys[k]
        slot = key & mask
        while True:
            at = index[slot]
            if at == 0:
                break
            if fps[at - 1] == key:
                rows[k] = at - 1
                slabs[k] = slab
                break
            slot = (slot + one) & mask


def warm() -> None:
    """Load the compiled kernels (or compile them) now, not in a worker's first micro-batch."""
    table = SeenTable(1)
    table.put(0, 0, 0, 0, 0)
    table.fetch([0])
    table.flush()


class _Slab:
    """The markers first set within one slab of ingest time: columns and their index (at most half
    full)."""

    __slots__ = ("fp", "index", "n", "route", "tag", "ts")

    def __init__(self) -> None:
        self.n = 0
        self.fp = np.empty(_FIRST_CAPACITY, np.uint64)
        self.ts = np.empty(_FIRST_CAPACITY, np.int64)
        self.route = np.empty(_FIRST_CAPACITY, np.uint32)
        self.tag = np.empty(_FIRST_CAPACITY, np.uint32)
        self.index = np.zeros(2 * _FIRST_CAPACITY, np.uint32)

    def append(self, fp: np.ndarray, ts: np.ndarray, route: np.ndarray, tag: np.ndarray) -> None:
        start, stop = self.n, self.n + fp.size
        if stop > self.fp.size:
            capacity = self.fp.size
            while capacity < stop:
                capacity *= 2
            for name in ("fp", "ts", "route", "tag"):
                grown = np.empty(capacity, getattr(self, name).dtype)
                grown[:start] = getattr(self, name)[:start]
                setattr(self, name, grown)
            self.index = np.zeros(2 * capacity, np.uint32)
            self.fp[start:stop] = fp
            _place(self.index, self.fp, 0, stop)
        else:
            self.fp[start:stop] = fp
            _place(self.index, self.fp, start, stop)
        self.ts[start:stop], self.route[start:stop], self.tag[start:stop] = ts, route, tag
        self.n = stop

    def rows(self, where: np.ndarray | None = None) -> np.ndarray:
        n = self.n
        found = np.empty(n, ROW)
        found["fp"], found["ts"], found["route"], found["tag"] = (
            self.fp[:n],
            self.ts[:n],
            self.route[:n],
            self.tag[:n],
        )
        return found if where is None else found[where[:n]]


class SeenTable:
    """One partition's markers. `get` and `put` per event, within a micro-batch `fetch`ed at once;
    `take_changes` hands the rows set since its last call to the changelog."""

    def __init__(self, horizon_ms: int) -> None:
        self._span = max(1, horizon_ms // 4)
        self._slabs: dict[int, _Slab] = {}  # by ingest time // span
        self._batch: dict[int, Marker] = {}  # set since the last flush
        self._fetched: dict[int, Marker | None] = {}  # looked up since the last flush
        self._changed: list[np.ndarray] = []

    def __len__(self) -> int:
        self.flush()
        return sum(slab.n for slab in self._slabs.values())

    @property
    def changed(self) -> bool:
        return bool(self._batch or self._changed)

    def fetch(self, fps: Sequence[int]) -> None:
        """Look the markers of a micro-batch's events up at once (`get` answers from what it found)."""
        keys = np.fromiter(fps, np.uint64, len(fps))
        slabs, rows = self._lookup(keys)
        fetched = self._fetched
        fetched.update(dict.fromkeys(fps))
        for k in np.flatnonzero(rows >= 0).tolist():
            slab, row = self._slabs[int(slabs[k])], int(rows[k])
            tag = int(slab.tag[row])
            fetched[fps[k]] = (int(slab.ts[row]), tag & 0xFF, int(slab.route[row]), tag >> 8)

    def get(self, fp: int) -> Marker | None:
        """The marker of an event (its `fingerprint`), None if none was set."""
        marker = self._batch.get(fp)
        if marker is not None:
            return marker
        found = self._fetched.get(fp, _UNFETCHED)
        if found is _UNFETCHED:  # an event outside a fetched micro-batch (one held for a hand-off)
            self.fetch([fp])
            found = self._fetched[fp]
        return found  # type: ignore[return-value]

    def put(self, fp: int, ts: int, code: int, route: int, video: int) -> None:
        self._batch[fp] = (ts, code, route, video)

    def flush(self) -> None:
        """Write the markers set since the last flush into the slabs (and the next changes)."""
        if not self._batch:
            return
        rows = np.empty(len(self._batch), ROW)
        rows["fp"] = np.fromiter(self._batch, np.uint64, rows.size)
        ts, code, route, video = (
            np.array(column, np.int64) for column in zip(*self._batch.values(), strict=True)
        )
        rows["ts"], rows["route"], rows["tag"] = ts, route, (video << 8) | code
        self._batch, self._fetched = {}, {}
        self._upsert(rows)
        self._changed.append(rows)

    def take_changes(self) -> bytes:
        """The rows set since the last call, as `ROW` records."""
        self.flush()
        changed, self._changed = self._changed, []
        return b"".join(rows.tobytes() for rows in changed)

    def load(self, raw: bytes, changed: bool = False) -> None:
        """Upsert `ROW` records (each key once: a changelog entry's, a snapshot's, a hand-off's);
        `changed`: they go to the next changes too (a hand-off taken over)."""
        self.flush()
        rows = np.frombuffer(raw, ROW)
        self._upsert(rows)
        self._fetched = {}  # what it found before may be set now
        if changed:
            self._changed.append(rows.copy())

    def rows(self) -> np.ndarray:
        """Every marker, as `ROW` records (a copy: what a snapshot's build encodes)."""
        self.flush()
        parts = [slab.rows() for slab in self._slabs.values()]
        return np.concatenate(parts) if parts else np.empty(0, ROW)

    def of_video(self, tag: int) -> np.ndarray:
        """The markers whose video has this tag (`video_tag`), as `ROW` records."""
        self.flush()
        parts = [slab.rows(slab.tag >> 8 == tag) for slab in self._slabs.values()]
        return np.concatenate(parts) if parts else np.empty(0, ROW)

    def markers(self) -> Iterable[tuple[int, Marker]]:
        """Every (fingerprint, marker), for tests and reports."""
        for row in self.rows().tolist():
            fp, ts, route, tag = row
            yield fp, (ts, tag & 0xFF, route, tag >> 8)

    def trim(self, floor: int) -> None:
        """Drop the slabs whose markers were all first set before `floor` (a marker moved earlier
        since, by an earlier copy, stays with its slab)."""
        self.flush()
        self._fetched = {}
        span = self._span
        for start in [s for s in self._slabs if (s + 1) * span <= floor]:
            del self._slabs[start]

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.full(keys.size, -1, np.int64)
        slabs = np.zeros(keys.size, np.int64)
        for start, slab in self._slabs.items():
            _find(slab.index, slab.fp, keys, rows, slabs, start)
        return slabs, rows

    def _upsert(self, rows: np.ndarray) -> None:
        if not rows.size:
            return
        keys = np.ascontiguousarray(rows["fp"])
        slabs, at = self._lookup(keys)
        old = at >= 0
        for k in np.flatnonzero(old).tolist():
            held, row = self._slabs[int(slabs[k])], int(at[k])
            held.ts[row], held.route[row], held.tag[row] = rows["ts"][k], rows["route"][k], rows["tag"][k]
        new = rows[~old]
        if not new.size:
            return
        starts = new["ts"] // self._span
        for start in np.unique(starts).tolist():
            part = new[starts == start]
            slab = self._slabs.get(start)
            if slab is None:
                slab = self._slabs[start] = _Slab()
            slab.append(np.ascontiguousarray(part["fp"]), part["ts"], part["route"], part["tag"])
