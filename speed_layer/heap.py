"""How the counter with its state in the worker sets CPython's cyclic garbage collector: it makes
and drops many objects a micro-batch (decoded events, change sets, the sink's plans) beside a big,
long-lived state, and each pass of the collector walks the young objects and what they reach.

With CPython's default, a pass every 700 new objects, a run of the counter in process
(`python -m bench.counter_cpu`) made some 800 young passes per 200,000 events, which with the full
passes they lead to took a tenth of its CPU; every 20,000 objects, the passes are some 40 times
fewer and the counter spends about what it spends with the collector off. Garbage in cycles (rare
here: the state's tables hold numbers, text and tuples of them) waits a little longer to be freed.
"""

from __future__ import annotations

import gc

# New objects (allocations less deallocations of tracked objects) between two young passes.
YOUNG_OBJECTS = 20_000


def tune() -> None:
    """Set the collector for the counter's process (its older generations as CPython sets them)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, older, oldest)
