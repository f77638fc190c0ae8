"""A table of fixed-width rows keyed by a 64-bit fingerprint, as the counter's per-event state is kept
(docs/design.md, "Speed layer"; docs/decisions/0007-compact-markers.md): never Python objects per
event.

Rows live in slabs by ingest time (a quarter of the retry horizon each), each an open-addressing
index over columns, so a trim drops whole slabs and never scans. A micro-batch is looked up at once
(`fetch`: one compiled probe a slab) and what it sets is written at once (`flush`); a changelog
entry, a snapshot or a hand-off carries the rows as records of the table's dtype. A row's value, as
`get` answers and `put` takes it, is a tuple of its fields after `fp` (a table may map its own
tuples to the rows: `_values` and `_rows`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numba import njit

_FIRST_CAPACITY = 1 << 10
_UNFETCHED = object()


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


class _Slab:
    """The rows first set within one slab of ingest time: a column per field and their index (at
    most half full)."""

    __slots__ = ("columns", "index", "n")

    def __init__(self, dtype: np.dtype) -> None:
        self.n = 0
        assert dtype.names is not None
        self.columns = {name: np.empty(_FIRST_CAPACITY, dtype[name]) for name in dtype.names}
        self.index = np.zeros(2 * _FIRST_CAPACITY, np.uint32)

    def append(self, rows: np.ndarray) -> None:
        start, stop = self.n, self.n + rows.size
        columns = self.columns
        grow = stop > columns["fp"].size
        if grow:
            capacity = columns["fp"].size
            while capacity < stop:
                capacity *= 2
            for name, column in columns.items():
                grown = np.empty(capacity, column.dtype)
                grown[:start] = column[:start]
                columns[name] = grown
            self.index = np.zeros(2 * capacity, np.uint32)
        for name, column in columns.items():
            column[start:stop] = rows[name]
        _place(self.index, columns["fp"], 0 if grow else start, stop)
        self.n = stop

    def rows(self, dtype: np.dtype, where: np.ndarray | None = None) -> np.ndarray:
        n = self.n
        found = np.empty(n, dtype)
        for name, column in self.columns.items():
            found[name] = column[:n]
        return found if where is None else found[where[:n]]


class RowTable:
    """One partition's rows of `dtype` (its first fields `fp`, the key, and `ts`, the ingest time
    the slabs go by). `get` and `put` per event, within a micro-batch `fetch`ed at once;
    `take_changes` hands the rows set since its last call to the changelog."""

    def __init__(self, dtype: np.dtype, horizon_ms: int) -> None:
        assert dtype.names is not None and dtype.names[:2] == ("fp", "ts"), dtype
        self.dtype = dtype
        self._span = max(1, horizon_ms // 4)
        self._slabs: dict[int, _Slab] = {}  # by ingest time // span
        self._batch: dict[int, tuple[int, ...]] = {}  # set since the last flush
        self._fetched: dict[int, tuple[int, ...] | None] = {}  # looked up since the last flush
        self._changed: list[np.ndarray] = []

    # -- a table's own tuples (these: the row's fields after `fp`) --------------------------------

    def _values(self, rows: np.ndarray) -> list[tuple[int, ...]]:
        """What `get` answers for these rows."""
        return [row[1:] for row in rows.tolist()]

    def _rows(self, fps: np.ndarray, values: list[tuple[int, ...]]) -> np.ndarray:
        """The rows of these keys and `put` values."""
        rows = np.empty(fps.size, self.dtype)
        rows["fp"] = fps
        names = self.dtype.names
        assert names is not None
        # One conversion of the whole batch (a tuple's fields are unsigned), then a column at a time:
        # some six times faster than converting each field's values on their own.
        matrix = np.array(values, np.uint64).reshape(fps.size, len(names) - 1)
        for at, name in enumerate(names[1:]):
            rows[name] = matrix[:, at]
        return rows

    # -- per micro-batch and per event ------------------------------------------------------------

    def __len__(self) -> int:
        self.flush()
        return sum(slab.n for slab in self._slabs.values())

    @property
    def changed(self) -> bool:
        return bool(self._batch or self._changed)

    def fetch(self, fps: Sequence[int]) -> None:
        """Look the rows of a micro-batch's keys up at once (`get` answers from what it found)."""
        keys = np.fromiter(fps, np.uint64, len(fps))
        slabs, rows = self._lookup(keys)
        fetched = self._fetched
        fetched.update(dict.fromkeys(fps))
        found = np.flatnonzero(rows >= 0)
        if not found.size:
            return
        gathered = np.empty(found.size, self.dtype)
        for start in np.unique(slabs[found]).tolist():
            mine = slabs[found] == start
            at = rows[found[mine]]
            for name, column in self._slabs[start].columns.items():
                gathered[name][mine] = column[at]
        for fp, value in zip(gathered["fp"].tolist(), self._values(gathered), strict=True):
            fetched[fp] = value

    def get(self, fp: int) -> Any:
        """The value of a key, None if none was set."""
        value = self._batch.get(fp)
        if value is not None:
            return value
        found = self._fetched.get(fp, _UNFETCHED)
        if found is _UNFETCHED:  # a key outside a fetched micro-batch (an event held for a hand-off)
            self.fetch([fp])
            found = self._fetched[fp]
        return found

    def put(self, fp: int, value: tuple[int, ...]) -> None:
        self._batch[fp] = value

    def flush(self) -> None:
        """Write the rows set since the last flush into the slabs (and the next changes)."""
        if not self._batch:
            return
        fps = np.fromiter(self._batch, np.uint64, len(self._batch))
        rows = self._rows(fps, list(self._batch.values()))
        self._batch, self._fetched = {}, {}
        self._upsert(rows)
        self._changed.append(rows)

    def entry_of(self, rows: np.ndarray) -> bytes:
        """Rows as a changelog entry, a snapshot chunk or a hand-off carries them."""
        return rows.tobytes()

    def take_changes(self) -> bytes:
        """The rows set since the last call, as records of the table's dtype."""
        self.flush()
        changed, self._changed = self._changed, []
        return b"".join(rows.tobytes() for rows in changed)

    def load(self, raw: bytes, changed: bool = False) -> None:
        """Upsert records (each key once: a changelog entry's, a snapshot's, a hand-off's);
        `changed`: they go to the next changes too (a hand-off taken over)."""
        self.flush()
        rows = np.frombuffer(raw, self.dtype)
        self._upsert(rows)
        self._fetched = {}  # what it found before may be set now
        if changed:
            self._changed.append(rows.copy())

    def rows(self, where: str | None = None, equals: int = 0, shift: int = 0) -> np.ndarray:
        """Every row (a copy: what a snapshot's build encodes), or those whose field `where`,
        shifted right by `shift` bits, equals `equals`."""
        self.flush()
        parts = [
            slab.rows(self.dtype, None if where is None else slab.columns[where] >> shift == equals)
            for slab in self._slabs.values()
        ]
        return np.concatenate(parts) if parts else np.empty(0, self.dtype)

    def items(self) -> Iterable[tuple[int, Any]]:
        """Every (key, value), for tests and reports."""
        rows = self.rows()
        return zip(rows["fp"].tolist(), self._values(rows), strict=True)

    def trim(self, floor: int) -> None:
        """Drop the slabs whose rows were all first set before `floor` (a row moved earlier since
        stays with its slab)."""
        self.flush()
        self._fetched = {}
        span = self._span
        for start in [s for s in self._slabs if (s + 1) * span <= floor]:
            del self._slabs[start]

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.full(keys.size, -1, np.int64)
        slabs = np.zeros(keys.size, np.int64)
        for start, slab in self._slabs.items():
            _find(slab.index, slab.columns["fp"], keys, rows, slabs, start)
        return slabs, rows

    def _upsert(self, rows: np.ndarray) -> None:
        if not rows.size:
            return
        keys = np.ascontiguousarray(rows["fp"])
        slabs, at = self._lookup(keys)
        old = at >= 0
        names = [name for name in self.dtype.names or () if name != "fp"]
        for start in np.unique(slabs[old]).tolist():
            mine = old & (slabs == start)
            columns = self._slabs[start].columns
            for name in names:
                columns[name][at[mine]] = rows[name][mine]
        new = rows[~old]
        if not new.size:
            return
        starts = new["ts"] // self._span
        for start in np.unique(starts).tolist():
            slab = self._slabs.get(start)
            if slab is None:
                slab = self._slabs[start] = _Slab(self.dtype)
            slab.append(new[starts == start])


def warm() -> None:
    """Load the compiled kernels (or compile them) now, not in a worker's first micro-batch."""
    table = RowTable(np.dtype([("fp", "<u8"), ("ts", "<i8")]), 1)
    table.put(0, (0,))
    table.fetch([0])
    table.flush()
