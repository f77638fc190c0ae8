"""Transform: the counting rules over log rows as pure DataFrame -> DataFrame functions, equal to
`counting.oracle.count` on the same events."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from batch_layer.verdict import (
    STATIC_SIGNALS,
    is_high_velocity,
    is_replay_loop,
    rejection_reason,
    with_static_signals,
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

# The columns of `classify`.
CLASSIFIED: tuple[str, ...] = (
    "event_id",
    "type",
    "video_id",
    "ts",
    "ingest_ts",
    "day",
    "viewer",
    "view_window",
    "outcome",
    "reason",
    "new_viewer",
    "new_viewer_day",
)

# Up to this many busy (address, minute) pairs are broadcast to the views; more are joined.
_MAX_BROADCAST_PAIRS = 1_000_000


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


def _busy_addresses(views: DataFrame) -> DataFrame:
    """The (ip, minute) pairs of `bots.is_high_velocity`, with a true `_busy`: few (bots), so they
    are broadcast to the views unless there are very many."""
    pairs = (
        views.where(F.col("ip").isNotNull())
        .groupBy("ip", "minute")
        .agg(F.count(F.lit(1)).alias("_views"))
        .where(is_high_velocity(F.col("_views")))
        .select("ip", "minute", F.lit(True).alias("_busy"))
        .localCheckpoint(eager=True)
    )
    return F.broadcast(pairs) if pairs.count() <= _MAX_BROADCAST_PAIRS else pairs


def _first(candidate: Column, in_window: WindowSpec) -> Column:
    """Whether the row is the first `candidate` of its window (rows in counting order)."""
    return candidate & (F.count_if(candidate).over(in_window) == 1)


def _view_outcomes(views: DataFrame) -> DataFrame:
    """Each view's outcome and rejection reason: short, rejected (as a bot), a repeat within its
    window, or counted (the first qualified human view of its window by ingestion order); and
    whether it is the first counted view of its viewer for the video (`new_viewer`), and of that
    day (`new_viewer_day`).

    Every window below is ordered by (video, viewer, day, view window, ingestion order): the views
    are shuffled once, by (video, viewer), and sorted once. A view window lies within its day, so
    the replay signal (per video, viewer and day) is one for the whole window: the first candidate
    is taken both ways and the signal picks one.
    """
    busy = F.coalesce(F.col("_busy"), F.lit(False))
    order = [F.col("view_window"), F.col("ingest_ts").asc_nulls_first(), F.col("event_id")]
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    so_far = (Window.unboundedPreceding, Window.currentRow)
    in_window = Window.partitionBy("video_id", "viewer", "day", "view_window").orderBy(*order[1:])
    in_day = Window.partitionBy("video_id", "viewer", "day").orderBy(*order)
    of_viewer = Window.partitionBy("video_id", "viewer").orderBy("day", *order)
    static, qualified = F.col(STATIC_SIGNALS), F.col("qualified")

    def candidate(replay_loop: bool) -> Column:
        return qualified & rejection_reason(static, busy, F.lit(replay_loop)).isNull()

    windows = views.join(_busy_addresses(views), on=["ip", "minute"], how="left").repartition(
        "video_id", "viewer"
    )
    # Each window operator computes its columns for both values of the replay signal (constant
    # over a day): the first candidate of each view window, then whether it is the first of its day.
    hypotheses = (("human", False), ("looping", True))
    windows = windows.withColumns(
        {
            f"_first_{name}": _first(candidate(loop), in_window.rowsBetween(*so_far))
            for name, loop in hypotheses
        }
    )
    judged = windows.withColumns(
        {
            **{
                f"_day_{name}": _first(F.col(f"_first_{name}"), in_day.rowsBetween(*so_far))
                for name, _ in hypotheses
            },
            "_replay": is_replay_loop(F.count(F.lit(1)).over(in_day.rowsBetween(*whole))),
        }
    ).withColumn("reason", rejection_reason(static, busy, F.col("_replay")))

    def chosen(name: str) -> Column:
        return F.when(F.col("_replay"), F.col(f"_{name}_looping")).otherwise(F.col(f"_{name}_human"))

    outcomes = judged.withColumn(
        "outcome",
        F.when(~qualified, F.lit(SHORT))
        .when(F.col("reason").isNotNull(), F.lit(REJECTED))
        .when(chosen("first"), F.lit(COUNTED))
        .otherwise(F.lit(REPEAT)),
    ).withColumn("new_viewer_day", (F.col("outcome") == COUNTED) & chosen("day"))
    counted = F.col("outcome") == COUNTED
    return outcomes.withColumn("new_viewer", _first(counted, of_viewer.rowsBetween(*so_far)))


def _reaction_outcomes(reactions: DataFrame) -> DataFrame:
    """Each reaction event: the state it leaves if it is its (user, video) pair's latest by
    `rules.reaction_order` (ts, event_id), else null."""
    latest = Window.partitionBy("user_id", "video_id").orderBy(F.col("ts").desc(), F.col("event_id").desc())
    states = F.create_map(*(F.lit(item) for pair in rules.REACTION_STATE.items() for item in pair))
    return reactions.withColumn("outcome", F.when(F.row_number().over(latest) == 1, states[F.col("type")]))


def classify(events: DataFrame) -> DataFrame:
    """One row per deduplicated event with what it counts as: `outcome` (a view's outcome, a
    latest reaction's state, else null), `reason` of a rejected view, `viewer`, `view_window`,
    `day`, and for counted views whether they bring a new viewer (`new_viewer`: of the video,
    `new_viewer_day`: of the video that day). The columns are `CLASSIFIED`."""
    # The static bot signals are properties of a row: computed first, they let the wide columns
    # they read go before the shuffles. Only what the rules read crosses the deduplication.
    is_view = F.col("type") == "view"
    is_reaction = F.col("type").isin(*rules.REACTION_STATE) & F.col("user_id").isNotNull()
    narrow = with_static_signals(events).select(
        "event_id",
        "type",
        "video_id",
        F.when(is_reaction, F.col("user_id")).alias("user_id"),
        F.when(is_view, viewer()).alias("viewer"),
        F.when(is_view, F.col("ip")).alias("ip"),
        STATIC_SIGNALS,
        F.when(is_view, _is_qualified()).alias("qualified"),
        "ts",
        "ingest_ts",
        "kafka_partition",
        "kafka_offset",
    )
    # The deduplicated log is kept: it feeds the views, the reactions and the other events.
    deduped = deduplicate(narrow).drop("kafka_partition", "kafka_offset").localCheckpoint(eager=True)
    timed = (
        deduped.withColumn("minute", floor_div("ts", rules.MINUTE_MS))
        .withColumn("day", floor_div("ts", rules.DAY_MS))
        .withColumn("view_window", floor_div("ts", rules.VIEW_WINDOW_MS))
    )
    is_reaction = F.col("user_id").isNotNull()
    views = _view_outcomes(timed.where(is_view))
    reactions = _reaction_outcomes(timed.where(is_reaction))
    others = timed.where(~is_view & ~is_reaction).withColumn("outcome", F.lit(None).cast("string"))
    nothing = {
        "reason": F.lit(None).cast("string"),
        "new_viewer": F.lit(False),
        "new_viewer_day": F.lit(False),
    }
    parts = (views, reactions.withColumns(nothing), others.withColumns(nothing))
    first, *rest = (part.select(*CLASSIFIED) for part in parts)
    for part in rest:
        first = first.unionByName(part)
    return first


def _counts() -> dict[str, Column]:
    """Every count of the outputs over classified rows (`count_if`s: they add up over any key)."""
    outcome = F.col("outcome")
    counts: dict[str, Column] = {
        "views": F.count_if(outcome == COUNTED),
        "likes": F.count_if(outcome == rules.LIKED),
        "dislikes": F.count_if(outcome == rules.DISLIKED),
        "unique_viewers": F.count_if(F.col("new_viewer")),
        "unique_viewers_day": F.count_if(F.col("new_viewer_day")),
        "short_views": F.count_if(outcome == SHORT),
        "repeat_views": F.count_if(outcome == REPEAT),
        "rejected": F.count_if(outcome == REJECTED),
    }
    for reason, column in zip(REASONS, REJECTED_COLUMNS, strict=True):
        counts[column] = F.count_if((outcome == REJECTED) & (F.col("reason") == reason))
    return counts


def grain_counts(classified: DataFrame, bucket_ms: int | None = None) -> DataFrame:
    """Every count per video, event-time `day` and, for views, ingestion `bucket` (`bucket_ms`;
    null for other events and without `bucket_ms`): the finest grain of the outputs, small enough
    to keep, from which `video_totals`, `daily_totals` and the per-bucket series add up."""
    is_view = F.col("type") == "view"
    bucket = F.when(is_view, floor_div("ingest_ts", bucket_ms)) if bucket_ms else F.lit(None)
    keyed = classified.withColumn("is_view", is_view).withColumn("bucket", bucket.cast("long"))
    return keyed.groupBy("video_id", "day", "is_view", "bucket").agg(
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


def transform(events: DataFrame) -> DataFrame:
    """Log rows (the log's columns) -> per-video counts with the baseline's columns."""
    return video_counts(classify(events))
