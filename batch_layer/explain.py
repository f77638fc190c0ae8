"""The explanations of a run: every view it refused as a bot's or flagged, with its score and the
signals that fired (`warehouse.explanations` reads them)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from batch_layer.columns import REJECTED
from batch_layer.load import write_sorted
from batch_layer.verdict import mask_table
from counting import bots
from counting.bots import BotFilter
from counting.settings import Settings
from warehouse.explanations import FLAGGED, REFUSED, explained_path


def _score(mask: Column, bot_filter: BotFilter) -> Column:
    """The score of a signal mask: `bots.score` of its signals, per mask, as a `mask_table` (the same
    doubles as Python's, each written by `repr`, which reads back exactly)."""
    scores = [repr(bots.score(bot_filter.signals_of(m))) for m in range(len(bot_filter.rejection_by_mask))]
    return F.get(mask_table(scores, "double"), mask)


def _signal_names(mask: Column) -> Column:
    """The names of a mask's signals, in `bots.MASK_ORDER`."""
    names = [F.when((mask.bitwiseAND(F.lit(bit))) != 0, F.lit(name)) for name, bit in bots.BIT.items()]
    return F.filter(F.array(*names), lambda name: name.isNotNull())


def explained_views(classified: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """The views `classify` refused as a bot's or flagged, with the columns of
    `warehouse.explanations.EXPLAINED_SCHEMA`."""
    refused = F.col("outcome") == F.lit(REJECTED)
    mask = F.col("signals")
    return classified.where(refused | F.col("flagged")).select(
        "event_id",
        "video_id",
        "ts",
        "ingest_ts",
        "viewer",
        F.when(refused, F.lit(REFUSED)).otherwise(F.lit(FLAGGED)).alias("verdict"),
        "reason",
        _score(mask, bot_filter).alias("score"),
        _signal_names(mask).alias("signals"),
        F.lit(float(bot_filter.reject_score)).alias("reject_score"),
        F.lit(float(bot_filter.soft_score)).alias("soft_score"),
        F.lit(bot_filter.version).alias("rules_version"),
    )


def write_explained(settings: Settings, run_id: str, classified: DataFrame, bot_filter: BotFilter) -> Path:
    """Overwrite the run's explanations (one Parquet file, in event order)."""
    frame = explained_views(classified, bot_filter)
    return write_sorted(frame, explained_path(settings.batch_dir, run_id), "event_id")
