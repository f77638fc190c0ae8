"""Bot verdicts of views in Spark: the window counts as Spark windows, the verdict itself computed
by `counting.bots` in a pandas UDF, so signals, weights, thresholds and tie-breaks exist once."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from counting import bots
from counting.event import Event
from counting.logschema import EVENT_COLUMNS

ADDRESS_MINUTE_VIEWS = "address_minute_views"
VIEWER_DAY_VIEWS = "viewer_day_views"


def _rejection_reasons(events: pd.DataFrame, address_views: pd.Series, viewer_views: pd.Series) -> pd.Series:
    """Per row: `bots.rejection_reason` of the view's signals, given its two window counts."""
    records = events.astype(object).where(events.notna(), None).to_dict("records")
    reasons = [
        bots.rejection_reason(bots.signals(Event(**record), int(address), int(viewer)))
        for record, address, viewer in zip(records, address_views, viewer_views, strict=True)
    ]
    return pd.Series(reasons, index=events.index, dtype=object)


_rejection_reason_udf = F.pandas_udf(_rejection_reasons, StringType())  # type: ignore[call-overload]


def rejection_reason(address_views: Column, viewer_views: Column) -> Column:
    """The reason a view is rejected as a bot view (null: it is not), from the event's own columns."""
    return _rejection_reason_udf(F.struct(*EVENT_COLUMNS), address_views, viewer_views)


def with_window_counts(views: DataFrame) -> DataFrame:
    """Add the two window counts of each view, over all the views given (deduplicated, every
    watch time): views from its address in its minute, views of its video by its viewer in its day.

    Expects `viewer` and event-time `minute` and `day` columns beside the event's columns.
    """
    per_address = Window.partitionBy("ip", "minute")
    per_viewer = Window.partitionBy("video_id", "viewer", "day")
    return views.withColumn(
        ADDRESS_MINUTE_VIEWS,
        F.when(F.col("ip").isNull(), F.lit(0)).otherwise(F.count(F.lit(1)).over(per_address)),
    ).withColumn(VIEWER_DAY_VIEWS, F.count(F.lit(1)).over(per_viewer))
