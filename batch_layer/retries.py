"""Retries: one row per event_id, its first copy by ingestion, sorting only the ids seen twice."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# The column that marks a row whose event id may have another copy (`batch_layer.hashes.mark_repeated`
# of `id_hash`): only those rows are deduplicated by a sort.
REPEATED = "_repeated"


def id_hash() -> Column:
    """The 64-bit hash of the event id that `REPEATED` is marked by."""
    return F.xxhash64("event_id")


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per event_id: its first copy by `rules.first_copy_order` (ingest_ts, event_id).

    Copies of one event_id ingested in the same millisecond are one broker write read twice; the
    Kafka position then picks one, so the result does not depend on the order of the files.
    """
    first = Window.partitionBy("event_id").orderBy(
        F.col("ingest_ts").asc_nulls_first(), F.col("kafka_partition"), F.col("kafka_offset")
    )
    return events.withColumn("_copy", F.row_number().over(first)).where(F.col("_copy") == 1).drop("_copy")


def without_retries(marked: DataFrame) -> DataFrame:
    """`deduplicate` of rows with `REPEATED` (the result has no such column), for a log whose event
    ids are nearly all unique: a row not marked is the only copy of its id and is kept as it is; the
    marked rows (the retries, and the ids of a rare hash collision) are few, and only they are
    shuffled and sorted by event_id. Reads `marked` twice: keep it (e.g. `localCheckpoint`)."""
    single = marked.where(~F.col(REPEATED)).drop(REPEATED)
    copies = deduplicate(marked.where(F.col(REPEATED)).drop(REPEATED))
    return single.unionByName(copies.localCheckpoint(eager=True))
