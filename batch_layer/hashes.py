"""Repeated keys: the 64-bit hashes seen on more than one row, found by a hash aggregate, so that
only their rows go through a shuffle and a sort."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from batch_layer.session import partial_aggregation_bypassed

# Up to this many repeated hashes are broadcast to the rows; above it, `repeated_hashes` gives up.
MAX_BROADCAST_REPEATS = 2_000_000
# The hashes are counted in this many hash tables. With the shuffle's partitions (4, which
# adaptive execution coalesced to 2) each table grew to 5 million keys for 10 million event ids,
# and growing and probing tables that size took about twice the CPU per key (10M events:
# 9.7-12.0 -> 5.2-8.5 task-s). 32 tables were no better than 16.
_HASH_PARTITIONS = 16
_HASH = "_hash"


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


def mark_repeated(frame: DataFrame, hashes: Mapping[str, Column]) -> DataFrame:
    """`frame` with one boolean column per entry of `hashes` (its name -> a 64-bit hash of the
    row, null where it does not apply): true when the row's hash may be shared with another row.
    An eager action; with more repeated hashes than can be broadcast, every flag is true.

    One aggregate counts every hash of every row (`repeated_hashes`), and each row probes the
    repeated ones once, here: later reads of the rows test a column instead of probing a hash set
    again (each probe misses the cache, about 130 ns a row). A hash seen under two names, or two
    keys with one hash, only make a row look shared: a false flag sends it through the general
    path, never a shortcut.
    """
    values = frame.select(F.explode(F.array(*hashes.values())).alias(_HASH)).where(F.col(_HASH).isNotNull())
    repeated = repeated_hashes(values, _HASH)
    if repeated is None:
        return frame.withColumns({name: F.lit(True) for name in hashes})
    marked = frame
    for name, value in hashes.items():
        key = f"{_HASH}{name}"
        flags = repeated.select(F.col(_HASH).alias(key), F.lit(True).alias(name))
        joined = marked.withColumn(key, value).join(F.broadcast(flags), on=key, how="left")
        marked = joined.select(*marked.columns, F.coalesce(F.col(name), F.lit(False)).alias(name))
    return marked
