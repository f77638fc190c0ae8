"""How the counter with its state in the worker sets CPython's cyclic garbage collector: young
passes far rarer than CPython's default (a pass every 700 new objects), because the counter makes
and drops many objects a micro-batch beside a big, long-lived state, and each pass walks the young
objects and what they reach. Cycles are rare here, so their garbage waiting longer costs little.
The measurements behind the threshold: docs/decisions/0005-speed-layer-state.md, "Measured since
it was built"; `python -m bench.counter_cpu` repeats them.
"""

from __future__ import annotations

import gc

# New objects (allocations less deallocations of tracked objects) between two young passes.
YOUNG_OBJECTS = 20_000


def tune() -> None:
    """Set the collector for the counter's process (its older generations as CPython sets them)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, older, oldest)
