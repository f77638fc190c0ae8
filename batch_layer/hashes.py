"""Repeated keys: the 64-bit hashes seen on more than one row, found by a hash aggregate, so that
only their rows go through a shuffle and a sort."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from batch_layer.session import partial_aggregation_bypassed

# Up to this many repeated hashes are broadcast to the rows; above it, `repeated_hashes` gives up.
MAX_BROADCAST_REPEATS = 2_000_000
# The hashes are counted in this many hash tables. With the shuffle's partitions (4, which
# adaptive execution coalesced to 2) each table grew to 5 million keys for 10 million event ids,
# and growing and probing tables that size took about twice the CPU per key (10M events:
# 9.7-12.0 -> 5.2-8.5 task-s). 32 tables were no better than 16.
_HASH_PARTITIONS = 16


def repeated_hashes(frame: DataFrame, column: str) -> DataFrame | None:
    """The values of the 64-bit hash `column` of `frame` found on more than one row, kept and
    marked for broadcast (one column, `column`); None when there are more than
    `MAX_BROADCAST_REPEATS` of them. An eager action.

    A row whose hash is not among them is the only row of its key (a collision only makes two
    keys look repeated). Nearly every hash is distinct within an input split, so the aggregate
    runs without its partial step, which would only add a second hash table.
    """
    with partial_aggregation_bypassed(frame.sparkSession):
        repeated = (
            frame.select(column)
            .repartition(_HASH_PARTITIONS, column)
            .groupBy(column)
            .agg(F.count(F.lit(1)).alias("_rows"))
            .where(F.col("_rows") > 1)
            .select(column)
            .localCheckpoint(eager=True)
        )
    if repeated.count() > MAX_BROADCAST_REPEATS:
        return None
    return F.broadcast(repeated)
