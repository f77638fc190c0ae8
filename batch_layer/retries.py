"""Retries: one row per event_id, its first copy by ingestion, sorting only the ids seen twice."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from batch_layer.hashes import repeated_hashes

_ID_HASH = "_id_hash"


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

    A hash aggregate (`repeated_hashes`) finds the 64-bit hashes of event_id seen more than once. A
    row whose hash occurs once is the only copy of its id and is kept as it is; the rows of the hashes
    seen more than once (the retries, and the ids of a rare hash collision) are few and go through
    `deduplicate`, so only they are shuffled and sorted by event_id.
    """
    hashed = events.withColumn(_ID_HASH, F.xxhash64("event_id"))
    repeated = repeated_hashes(hashed, _ID_HASH)
    if repeated is None:
        return deduplicate(events)
    single = hashed.join(repeated, on=_ID_HASH, how="left_anti").drop(_ID_HASH)
    copies = deduplicate(hashed.join(repeated, on=_ID_HASH, how="left_semi").drop(_ID_HASH))
    return single.unionByName(copies.localCheckpoint(eager=True))
