"""A partition's snapshot, built a chunk a micro-batch (docs/design.md, "Speed layer": compaction keeps
restore time and memory bounded), so that neither the worker's loop nor Redis ever handles the
whole state at once.

A build starts after a micro-batch B0 is applied: it takes shallow copies of the state's tables.
That batch and each one after it encode the next entries of those copies into a chunk (a budget
a batch, `chunk_budget`, shared by the partitions in turns), committed with the batch
(`commit.lua` appends it to the partition's chunks being built; B0's commit also marks where B0's
changelog entry lies). The last chunk's commit makes the built chunks
the partition's snapshot and drops the changelog entries before B0's.

A restore loads the chunks, then every changelog entry from B0's on, and gets the state exactly,
although the chunks were encoded over many batches: a value that changed after B0 is in a later
entry (entries hold absolute values, replayed in order; a drop is a None), a value that did not
change is the copied one, and a value changed in place (a bucket's counts) is encoded newer than
B0's and set again by the entries that changed it.

Why chunks: a whole-state snapshot was one Redis value, which is at most 512 MB, and one encoding
that paused the worker's loop for seconds on a long run (docs/decisions/0005-speed-layer-state.md,
"Changed (2026-11-27...)").
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np

from speed_layer.state.partition import ROW_TABLES, TABLES, PartitionState

# The entries of the state's tables a micro-batch encodes into chunks (`StateCounter.plan`): this
# many at least (some 20 ms of the loop), or CHUNK_ENTRIES_AN_EVENT for each event of the batch. A
# build of N entries then spans N / CHUNK_ENTRIES_AN_EVENT events or fewer: with some 2.5 entries
# an event of state, a fifth of the events the state holds, during which the changelog it keeps
# grows (a restore reads it after the chunks) and the previous snapshot stays (a restore needs one).
CHUNK_ENTRIES = 50_000
CHUNK_ENTRIES_AN_EVENT = 12


def chunk_budget(events: int) -> int:
    """The entries a micro-batch of `events` events may encode into snapshot chunks."""
    return max(CHUNK_ENTRIES, CHUNK_ENTRIES_AN_EVENT * events)


class SnapshotBuild:
    """A snapshot being built, a chunk at a time, from the tables as they were at its start."""

    def __init__(self, state: PartitionState) -> None:
        self.offset = state.offset
        self.newest = state.newest_ingest
        copies = state.table_copies()
        # The tables of fixed-width rows as records, taken a slice at a time.
        self._rows: dict[str, np.ndarray] = {table: copies[table] for table in ROW_TABLES}
        self._entry_of = {table: getattr(state, table).entry_of for table in ROW_TABLES}
        self._items: list[tuple[str, Iterator[tuple[str, Any]]]] = [
            (table, iter(copies[table].items())) for table in TABLES if table not in ROW_TABLES
        ]
        self.chunks = 0  # planned so far; the next one's index
        self.planned_all = False
        self.stored_bytes = 0  # of the chunks compressed so far (what Redis keeps)
        self.log_bytes = 0  # of the changelog entries from B0's on (what the switch keeps)

    def next_chunk(self, entries: int) -> tuple[int, dict[str, object], int, bool]:
        """The next chunk's index, its entry (the changelog entry's layout, with at most `entries`
        of the tables' entries), how many entries it holds and whether it is the last one."""
        chunk: dict[str, object] = {"offset": self.offset, "newest": self.newest, "sketches": {}}
        left = entries
        for table, rows in self._rows.items():
            taken, self._rows[table] = rows[:left], rows[left:]
            chunk[table] = self._entry_of[table](taken)
            left -= taken.size
        for table, items in self._items:
            part = dict(islice(items, left)) if left > 0 else {}
            chunk[table] = part
            left -= len(part)
        self.planned_all = left > 0  # every table's copy ran out before the chunk was full
        index, self.chunks = self.chunks, self.chunks + 1
        return index, chunk, entries - left, self.planned_all
