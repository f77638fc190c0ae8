"""Bot verdicts of views in Spark, with the rules of `counting.bots` computed once per distinct value.

The signals of a user agent, an address and a TLS fingerprint are computed by `counting.bots` on
the driver, once per distinct value, and only the flagged values go back to the rows. The watch
anomaly and the two window thresholds are Column expressions of the constants of `counting.bots`.
The verdict of each of the 64 combinations of signals is `bots.rejection_reason`, evaluated on the
driver and applied as a map, so weights, the reject score and the tie-break exist once.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from counting import bots

ADDRESS_MINUTE_VIEWS = "address_minute_views"
VIEWER_DAY_VIEWS = "viewer_day_views"

# The signals in the order `bots.signals` lists them (the order the score adds their weights).
_ORDER: tuple[bots.Signal, ...] = (
    bots.SCRIPTED_AGENT,
    bots.DATACENTER_IP,
    bots.BAD_TLS,
    bots.WATCH_ANOMALY,
    bots.ADDRESS_VELOCITY,
    bots.REPLAY_RATE,
)
_FLAG = {signal.name: f"_is_{signal.name}" for signal in _ORDER}
STATIC_COLUMNS: tuple[str, ...] = tuple(_FLAG[s.name] for s in _ORDER[:4])


# Up to this many flagged values are matched with an IN list (a hash set); more are broadcast.
_MAX_IN_LIST = 10_000


def _flags_of(frame: DataFrame, column: str, check: Callable[[str | None], bool], flag: str) -> DataFrame:
    """Add `flag`: whether `check` (a rule of `counting.bots`) holds for the row's `column`.

    The rule runs on the driver once per distinct value; only the flagged values (few: bots)
    travel back to the rows, so no Python worker runs and no row is shuffled for it.
    """
    values = frame.select(column).where(F.col(column).isNotNull()).distinct()
    flagged = sorted(v for (v,) in values.toLocalIterator() if check(v))
    if not flagged:
        return frame.withColumn(flag, F.lit(False))
    if len(flagged) <= _MAX_IN_LIST:
        return frame.withColumn(flag, F.coalesce(F.col(column).isin(flagged), F.lit(False)))
    spark = frame.sparkSession
    table = spark.createDataFrame([(v, True) for v in flagged], f"{column} string, {flag} boolean")
    joined = frame.join(F.broadcast(table), on=column, how="left")
    return joined.withColumn(flag, F.coalesce(F.col(flag), F.lit(False)))


def _is_watch_anomaly() -> Column:
    """`bots.is_watch_anomaly` as a Column: over the plausible maximum, or over the video's length."""
    watched, duration = F.col("watch_secs"), F.col("video_duration_secs")
    over_length = watched > duration * F.lit(bots.WATCH_OVERRUN_FACTOR) + F.lit(bots.WATCH_OVERRUN_SLACK_SECS)
    too_long = watched > F.lit(bots.MAX_WATCH_SECS)
    return F.coalesce(too_long | over_length, too_long)


def with_static_signals(events: DataFrame) -> DataFrame:
    """Add the boolean signals a row shows on its own (agent, address, fingerprint, watch time).

    They are properties of the row alone, so they may be computed before deduplication; the
    columns they read (agent, fingerprint, duration) can then be dropped before any shuffle.
    """
    flagged = _flags_of(events, "user_agent", bots.is_scripted_agent, _FLAG["scripted_agent"])
    flagged = _flags_of(flagged, "ja3", bots.is_bad_ja3, _FLAG["bad_ja3"])
    flagged = _flags_of(flagged, "ip", bots.is_datacenter_ip, _FLAG["datacenter_ip"])
    return flagged.withColumn(_FLAG["watch_anomaly"], F.coalesce(_is_watch_anomaly(), F.lit(False)))


def _reasons_by_combination() -> dict[int, str]:
    """`bots.rejection_reason` of every combination of signals (bit i: signal i of `_ORDER`)."""
    reasons = {}
    for mask in range(1 << len(_ORDER)):
        found = [signal for bit, signal in enumerate(_ORDER) if mask >> bit & 1]
        reason = bots.rejection_reason(found)
        if reason is not None:
            reasons[mask] = reason
    return reasons


def rejection_reason(address_views: Column, viewer_views: Column) -> Column:
    """The reason a view is rejected as a bot view (null: it is not), from its static signal
    columns (`with_static_signals`) and its two window counts."""
    flags = [F.col(column) for column in STATIC_COLUMNS]
    flags += [
        address_views > F.lit(bots.MAX_VIEWS_PER_ADDRESS_MINUTE),
        viewer_views > F.lit(bots.MAX_REPLAYS_PER_DAY),
    ]
    mask = F.lit(0)
    for bit, flag in enumerate(flags):
        mask = mask + F.when(flag, F.lit(1 << bit)).otherwise(F.lit(0))
    table = F.create_map(*(F.lit(item) for pair in _reasons_by_combination().items() for item in pair))
    return table[mask]


def with_window_counts(views: DataFrame) -> DataFrame:
    """Add the two window counts of each view, over all the views given (deduplicated, every
    watch time): views from its address in its minute, views of its video by its viewer in its day.

    Expects `viewer` and event-time `minute` and `day` columns beside the event's columns. The
    viewer window runs on views partitioned by (video_id, viewer), which the counting window of
    the transform reuses.
    """
    per_address = Window.partitionBy("ip", "minute")
    per_viewer = Window.partitionBy("video_id", "viewer", "day")
    with_address = views.withColumn(
        ADDRESS_MINUTE_VIEWS,
        F.when(F.col("ip").isNull(), F.lit(0)).otherwise(F.count(F.lit(1)).over(per_address)),
    )
    return with_address.repartition("video_id", "viewer").withColumn(
        VIEWER_DAY_VIEWS, F.count(F.lit(1)).over(per_viewer)
    )
