"""Retries: one row per event_id, its first copy by ingestion, sorting only the ids seen twice."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from batch_layer.session import partial_aggregation_bypassed

# Up to this many repeated id hashes are broadcast to the rows; above it every row is sorted.
_MAX_BROADCAST_REPEATS = 2_000_000
_ID_HASH = "_id_hash"
# The id hashes are counted in this many hash tables. With the shuffle's partitions (4, which
# adaptive execution coalesced to 2) each table grew to 5 million keys, and growing and probing
# tables that size took about twice the CPU per key (10M events: 9.7-12.0 -> 5.2-8.5 task-s).
_ID_HASH_PARTITIONS = 16


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per event_id: its first copy by `rules.first_copy_order` (ingest_ts, event_id).

    Copies of one event_id ingested in the same millisecond are one broker write read twice; the
    Kafka position then picks one, so the result does not depend on the order of the files.
    """
    first = Window.partitionBy("event_id").orderBy(
        F.col("ingest_ts").asc_nulls_first(), F.col("kafka_partition"), F.col("kafka_offset")
    )
    return events.withColumn("_copy", F.row_number().over(first)).where(F.col("_copy") == 1).drop("_copy")


def without_retries(events: DataFrame) -> DataFrame:
    """`deduplicate`, for a log whose event ids are nearly all unique: read `events` three times,
    so keep them (e.g. `localCheckpoint`) beforehand.

    A hash aggregate counts the rows of each 64-bit hash of event_id, without partial aggregation
    (every input split holds mostly distinct ids, so it would only add a second hash table). A row
    whose hash occurs once is the only copy of its id and is kept as it is; the rows of the hashes
    seen more than once (the retries, and the ids of a rare hash collision) are few and go through
    `deduplicate`, so only they are shuffled and sorted by event_id.
    """
    hashed = events.withColumn(_ID_HASH, F.xxhash64("event_id"))
    with partial_aggregation_bypassed(events.sparkSession):
        repeated = (
            hashed.repartition(_ID_HASH_PARTITIONS, _ID_HASH)
            .groupBy(_ID_HASH)
            .agg(F.count(F.lit(1)).alias("_copies"))
            .where(F.col("_copies") > 1)
            .select(_ID_HASH)
            .localCheckpoint(eager=True)
        )
    if repeated.count() > _MAX_BROADCAST_REPEATS:
        return deduplicate(events)
    repeated = F.broadcast(repeated)
    single = hashed.join(repeated, on=_ID_HASH, how="left_anti").drop(_ID_HASH)
    copies = deduplicate(hashed.join(repeated, on=_ID_HASH, how="left_semi").drop(_ID_HASH))
    return single.unionByName(copies.localCheckpoint(eager=True))
