"""Transform: the counting rules over log rows as pure DataFrame -> DataFrame functions, equal to
`counting.oracle.count` on the same events."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from batch_layer.verdict import (
    ADDRESS_MINUTE_VIEWS,
    STATIC_COLUMNS,
    VIEWER_DAY_VIEWS,
    rejection_reason,
    with_static_signals,
    with_window_counts,
)
from counting import rules
from counting.bots import REASONS
from warehouse.baseline import REJECTED_COLUMNS, baseline_schema

# What became of each deduplicated view (the `outcome` column); latest reactions carry their state.
SHORT = "short"
REJECTED = "rejected"
REPEAT = "repeat"
COUNTED = "counted"

ANON_PREFIX = rules.ANON_VIEWER_PREFIX

DAILY_KEY: tuple[str, ...] = ("date", "video_id")


def floor_div(column: str, divisor: int) -> Column:
    """`column // divisor` exactly as Python computes it, for integers below 2**53."""
    value = F.col(column)
    # The numerator is an exact multiple of the divisor, so the double quotient is exact.
    return ((value - F.pmod(value, F.lit(divisor))) / F.lit(divisor)).cast("long")


def viewer() -> Column:
    """`rules.viewer_of`: the user, or the anonymous prefix and the session."""
    return F.coalesce(F.col("user_id"), F.concat(F.lit(ANON_PREFIX), F.col("session_id")))


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per event_id: its first copy by `rules.first_copy_order` (ingest_ts, event_id).

    Copies of one event_id ingested in the same millisecond are one broker write read twice; the
    Kafka position then picks one, so the result does not depend on the order of the files.
    """
    first = Window.partitionBy("event_id").orderBy(
        F.col("ingest_ts").asc_nulls_first(), F.col("kafka_partition"), F.col("kafka_offset")
    )
    return events.withColumn("_copy", F.row_number().over(first)).where(F.col("_copy") == 1).drop("_copy")


def _is_qualified() -> Column:
    """`rules.is_qualified_view` on a view: watched at least the minimum (NaN never qualifies)."""
    watched = F.coalesce(F.col("watch_secs"), F.lit(0.0))
    return (watched >= F.lit(rules.MIN_WATCH_SECS)) & ~F.isnan(watched)


def _view_outcomes(views: DataFrame) -> DataFrame:
    """Each view's outcome and rejection reason: short, rejected (as a bot), a repeat within its
    window, or counted (the first qualified human view of its window by ingestion order)."""
    judged = with_window_counts(views).withColumn(
        "reason", rejection_reason(F.col(ADDRESS_MINUTE_VIEWS), F.col(VIEWER_DAY_VIEWS))
    )
    candidate = _is_qualified() & F.col("reason").isNull()
    in_window = Window.partitionBy("video_id", "viewer", "view_window", "_candidate").orderBy(
        "ingest_ts", "event_id"
    )
    return (
        judged.withColumn("_candidate", candidate)
        .withColumn(
            "outcome",
            F.when(~_is_qualified(), F.lit(SHORT))
            .when(F.col("reason").isNotNull(), F.lit(REJECTED))
            .when(F.row_number().over(in_window) == 1, F.lit(COUNTED))
            .otherwise(F.lit(REPEAT)),
        )
        .withColumn("reason", F.when(F.col("outcome") == REJECTED, F.col("reason")))
        .drop("_candidate", ADDRESS_MINUTE_VIEWS, VIEWER_DAY_VIEWS, *STATIC_COLUMNS)
    )


def _reaction_outcomes(reactions: DataFrame) -> DataFrame:
    """Each reaction event: the state it leaves if it is its (user, video) pair's latest by
    `rules.reaction_order` (ts, event_id), else null."""
    latest = Window.partitionBy("user_id", "video_id").orderBy(F.col("ts").desc(), F.col("event_id").desc())
    states = F.create_map(*(F.lit(item) for pair in rules.REACTION_STATE.items() for item in pair))
    return reactions.withColumn(
        "outcome", F.when(F.row_number().over(latest) == 1, states[F.col("type")])
    ).withColumn("reason", F.lit(None).cast("string"))


def classify(events: DataFrame) -> DataFrame:
    """One row per deduplicated event with what it counts as: `outcome` (a view's outcome, a
    latest reaction's state, else null), `reason` of a rejected view, `viewer`, `view_window`, `day`."""
    # The static bot signals are properties of a row: computed first, they let the wide columns
    # they read go before the shuffles. The deduplicated log is kept (it feeds three branches).
    flagged = with_static_signals(events).drop("user_agent", "ja3", "video_duration_secs")
    deduped = (
        deduplicate(flagged)
        .withColumn("viewer", F.when(F.col("type") == "view", viewer()))
        .withColumn("minute", floor_div("ts", rules.MINUTE_MS))
        .withColumn("day", floor_div("ts", rules.DAY_MS))
        .withColumn("view_window", floor_div("ts", rules.VIEW_WINDOW_MS))
        .localCheckpoint(eager=True)
    )
    is_view = F.col("type") == "view"
    is_reaction = F.col("type").isin(*rules.REACTION_STATE) & F.col("user_id").isNotNull()
    others = (
        deduped.where(~is_view & ~is_reaction)
        .withColumn("outcome", F.lit(None).cast("string"))
        .withColumn("reason", F.lit(None).cast("string"))
    )
    parts = [_view_outcomes(deduped.where(is_view)), _reaction_outcomes(deduped.where(is_reaction)), others]
    columns = ["event_id", "type", "video_id", "ts", "ingest_ts", "day", "viewer", "view_window"]
    columns += ["outcome", "reason"]
    first, *rest = (part.select(*columns) for part in parts)
    for part in rest:
        first = first.unionByName(part)
    return first


def _aggregates() -> dict[str, Column]:
    outcome = F.col("outcome")
    counts: dict[str, Column] = {
        "views": F.count_if(outcome == COUNTED),
        "likes": F.count_if(outcome == rules.LIKED),
        "dislikes": F.count_if(outcome == rules.DISLIKED),
        "unique_viewers": F.count_distinct(F.when(outcome == COUNTED, F.col("viewer"))),
        "short_views": F.count_if(outcome == SHORT),
        "repeat_views": F.count_if(outcome == REPEAT),
    }
    for reason, column in zip(REASONS, REJECTED_COLUMNS, strict=True):
        counts[column] = F.count_if((outcome == REJECTED) & (F.col("reason") == reason))
    return counts


def video_counts(classified: DataFrame) -> DataFrame:
    """Per video, the baseline's columns: exactly `counting.oracle.count` over the same events."""
    aggregates = _aggregates()
    names = baseline_schema().names
    return classified.groupBy("video_id").agg(*(aggregates[n].alias(n) for n in names[1:])).select(*names)


def daily_video_counts(classified: DataFrame) -> DataFrame:
    """Per event-time UTC day and video: the same counts, each event on the day of its `ts`
    (a like on the day of the reaction that decides it; unique viewers are that day's)."""
    aggregates = _aggregates()
    names = baseline_schema().names
    daily = classified.withColumn("date", F.date_from_unix_date(F.col("day").cast("int")))
    return daily.groupBy(*DAILY_KEY).agg(*(aggregates[n].alias(n) for n in names[1:]))


def transform(events: DataFrame) -> DataFrame:
    """Log rows (the log's columns) -> per-video counts with the baseline's columns."""
    return video_counts(classify(events))
