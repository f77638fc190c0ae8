"""The bot signals of a view that its neighbours decide, over the deduplicated views: busy addresses
(velocity), addresses rotating user agents, and views bunched near the counting threshold."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from batch_layer.columns import is_view
from batch_layer.session import partial_aggregation_bypassed
from batch_layer.verdict import (
    STATIC_SIGNALS,
    allowed_addresses,
    is_agent_rotation,
    is_bunched,
    is_high_velocity,
    reason_of,
    with_bunching,
)
from counting import rules
from counting.bots import BotFilter

# Up to this many busy (address, minute) pairs are broadcast to the views; more are joined.
_MAX_BROADCAST_PAIRS = 1_000_000

# The hash of a view's user agent (null: none, or empty): what the rotation signal counts, 64 bits
# wide so that the distinct agents of an address and hour collide with odds below 1e-15.
AGENT = "_agent"


def _busy_views(views: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """The (ip, ts) of `is_high_velocity` views, with a true `_busy`: those that some 60 s of
    event time holding them (`rules.VELOCITY_WINDOW_MS`) hold with more views from their address
    than the limit, as the oracle's `address_windows` finds them.

    Any 60 s lie in two consecutive minutes, so one of those holds more than half the limit: only
    such heavy (address, minute) pairs (few: bots) and the minutes two either side of them may hold
    busy views and all the views their 60 s reach. Those views are windowed by address and time:
    each view's 60 s up to it (`_ending`), then the busiest of those ending in the 60 s from it.
    Views of other minutes are not busy: no window is computed for them."""
    limit = bot_filter.max_views_per_address_minute
    heavy = (
        views.where(F.col("ip").isNotNull())
        .groupBy("ip", "minute")
        .agg(F.count(F.lit(1)).alias("_views"))
        .where(F.col("_views") > F.lit(limit // 2))
    )
    with partial_aggregation_bypassed(views.sparkSession):  # nearly every pair is distinct
        heavy = heavy.localCheckpoint(eager=True)
    if heavy.isEmpty():
        return views.sparkSession.createDataFrame([], "ip string, ts long, _busy boolean")
    around = heavy.select(
        "ip", F.explode(F.sequence(F.col("minute") - 2, F.col("minute") + 2)).alias("minute")
    )
    by_time = Window.partitionBy("ip").orderBy("ts")
    span = rules.VELOCITY_WINDOW_MS - 1
    near = views.join(F.broadcast(around.distinct()), on=["ip", "minute"], how="left_semi").select("ip", "ts")
    ending = near.withColumn("_ending", F.count(F.lit(1)).over(by_time.rangeBetween(-span, 0)))
    busiest = F.max("_ending").over(by_time.rangeBetween(0, span))
    return (
        ending.withColumn("_busiest", busiest)
        .where(is_high_velocity(F.col("_busiest"), bot_filter))
        .select("ip", "ts", F.lit(True).alias("_busy"))
        .distinct()
    )


def _rotating_addresses(views: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """The (ip, hour) pairs of `is_agent_rotation`, with a true `_rotating`: few (bots). Only the
    pairs that show two agents or more (their least and greatest agent hash differ) have their
    agents counted."""
    with_agent = views.where(F.col("ip").isNotNull() & F.col(AGENT).isNotNull())
    several = (
        with_agent.groupBy("ip", "hour")
        .agg(F.min(AGENT).alias("_least"), F.max(AGENT).alias("_greatest"))
        .where(F.col("_least") != F.col("_greatest"))
        .select("ip", "hour")
    )
    with partial_aggregation_bypassed(views.sparkSession):
        several = several.localCheckpoint(eager=True)
    return (
        with_agent.join(F.broadcast(several), on=["ip", "hour"], how="left_semi")
        .groupBy("ip", "hour")
        .agg(F.count_distinct(AGENT).alias("_agents"))
        .where(is_agent_rotation(F.col("_agents"), bot_filter))
        .select("ip", "hour", F.lit(True).alias("_rotating"))
    )


def _not_allowed(pairs: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """The address pairs but those of the allow-list's addresses (no address signal for them),
    kept, and broadcast unless there are very many."""
    pairs = pairs.localCheckpoint(eager=True)
    if bot_filter.allowed.networks:
        found = [row["ip"] for row in pairs.select("ip").distinct().collect()]
        allowed = allowed_addresses(found, bot_filter)
        if allowed:
            pairs = pairs.where(~F.col("ip").isin(allowed)).localCheckpoint(eager=True)
    return F.broadcast(pairs) if pairs.count() <= _MAX_BROADCAST_PAIRS else pairs


def address_signals(views: DataFrame, bot_filter: BotFilter) -> tuple[DataFrame, DataFrame]:
    """The two address signals of the views: the (ip, ts) of busy views (`_busy_views`) and the
    (ip, hour) of rotating addresses (`_rotating_addresses`), but for the allow-list's addresses."""
    busy = _not_allowed(_busy_views(views, bot_filter), bot_filter)
    rotating = _not_allowed(_rotating_addresses(views, bot_filter), bot_filter)
    return busy, rotating


# Marks a view that stopped near the counting threshold (`is_near_threshold`).
NEAR = "_near"


def with_threshold_bunching(rows: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """The rows with the threshold-bunching signal in the static mask of each view near the
    threshold on a bunched (video, day): its views long enough to count that their static signals
    do not reject are counted per (video, day) once, over the deduplicated log; the bunched days
    are few (gamed videos), so they are broadcast, and with none the rows only lose their `_near`
    column."""
    weighed = is_view() & F.col("qualified") & reason_of(F.col(STATIC_SIGNALS), bot_filter).isNull()
    days = (
        rows.where(weighed)
        .groupBy("video_id", "day")
        .agg(F.count(F.lit(1)).alias("_qualified"), F.count_if(F.col(NEAR)).alias("_near_views"))
        .where(is_bunched(F.col("_near_views"), F.col("_qualified"), bot_filter))
        .select("video_id", "day", F.lit(True).alias("_bunched"))
        .localCheckpoint(eager=True)
    )
    if days.isEmpty():
        return rows.drop(NEAR)
    bunched = F.col(NEAR) & F.coalesce(F.col("_bunched"), F.lit(False))
    return (
        rows.join(F.broadcast(days), on=["video_id", "day"], how="left")
        .withColumn(STATIC_SIGNALS, with_bunching(F.col(STATIC_SIGNALS), bunched))
        .drop(NEAR, "_bunched")
    )
