"""Totals: the counts of classified events at their finest grain (video, day, ingestion bucket), and
per video and per day added up from it: the baseline's columns."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from batch_layer.columns import COUNTED, REJECTED, REPEAT, SHORT, floor_div, is_view
from counting import rules
from counting.bots import REASONS
from warehouse.baseline import REJECTED_COLUMNS, baseline_schema

# The outcomes `grain_counts` counts, in the order of their codes.
_OUTCOMES = (COUNTED, rules.LIKED, rules.DISLIKED, SHORT, REPEAT, REJECTED)


def _code(column: Column, values: Sequence[str]) -> Column:
    """The index of `column`'s value in `values` (null for any other value)."""
    code = F.when(column == values[0], F.lit(0))
    for index, value in enumerate(values[1:], start=1):
        code = code.when(column == value, F.lit(index))
    return code


def _counts() -> dict[str, Column]:
    """Every count of the outputs over rows coded by `grain_counts` (`count_if`s of small
    integers: they add up over any key)."""
    outcome, reason = F.col("_outcome"), F.col("_reason")

    def of(value: str) -> Column:
        return F.count_if(outcome == _OUTCOMES.index(value))

    counts: dict[str, Column] = {
        "views": of(COUNTED),
        "likes": of(rules.LIKED),
        "dislikes": of(rules.DISLIKED),
        "unique_viewers": F.count_if(F.col("new_viewer")),
        "unique_viewers_day": F.count_if(F.col("new_viewer_day")),
        "short_views": of(SHORT),
        "repeat_views": of(REPEAT),
        "flagged": F.count_if(F.col("flagged")),
        "rejected": of(REJECTED),
    }
    for index, column in enumerate(REJECTED_COLUMNS):
        counts[column] = F.count_if(reason == index)
    return counts


def grain_counts(classified: DataFrame, bucket_ms: int | None = None) -> DataFrame:
    """Every count per video, event-time `day` and, for views, ingestion `bucket` (`bucket_ms`;
    null for other events and without `bucket_ms`): the finest grain of the outputs, small enough
    to keep, from which `video_totals`, `daily_totals` and the per-bucket series add up.

    Each row's outcome and a rejected view's reason are coded as integers once, so the twenty
    counts compare integers rather than strings."""
    view = is_view()
    bucket = F.when(view, floor_div("ingest_ts", bucket_ms)) if bucket_ms else F.lit(None)
    outcome = F.col("outcome")
    coded = classified.select(
        "video_id",
        "day",
        view.alias("is_view"),
        bucket.cast("long").alias("bucket"),
        _code(outcome, _OUTCOMES).alias("_outcome"),
        F.when(outcome == REJECTED, _code(F.col("reason"), REASONS)).alias("_reason"),
        "new_viewer",
        "new_viewer_day",
        F.coalesce(F.col("flagged"), F.lit(False)).alias("flagged"),
    )
    return coded.groupBy("video_id", "day", "is_view", "bucket").agg(
        *(count.alias(name) for name, count in _counts().items())
    )


def _totals(grain: DataFrame, *key: str | Column, unique_viewers: str) -> DataFrame:
    names = baseline_schema().names[1:]
    sums = {name: F.sum(name) for name in names}
    sums["unique_viewers"] = F.sum(unique_viewers)
    return grain.groupBy(*key).agg(*(F.coalesce(sums[n], F.lit(0)).cast("long").alias(n) for n in names))


def video_totals(grain: DataFrame) -> DataFrame:
    """Per video, the baseline's columns, added up from `grain_counts`."""
    return _totals(grain, "video_id", unique_viewers="unique_viewers")


def daily_totals(grain: DataFrame) -> DataFrame:
    """Per event-time UTC day and video, the baseline's counts, added up from `grain_counts`
    (unique viewers are that day's)."""
    date = F.date_from_unix_date(F.col("day").cast("int")).alias("date")
    return _totals(grain, date, "video_id", unique_viewers="unique_viewers_day")


def video_counts(classified: DataFrame) -> DataFrame:
    """Per video, the baseline's columns: exactly `counting.oracle.count` over the same events."""
    return video_totals(grain_counts(classified))


def daily_video_counts(classified: DataFrame) -> DataFrame:
    """Per event-time UTC day and video: the same counts, each event on the day of its `ts`
    (a like on the day of the reaction that decides it; unique viewers are that day's)."""
    return daily_totals(grain_counts(classified))
