"""Transform: the counting rules over log rows as pure DataFrame -> DataFrame functions, equal to
`counting.oracle.count` on the same events."""

from __future__ import annotations

from collections.abc import Callable

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from batch_layer.columns import COUNTED, REJECTED, REPEAT, SHORT, floor_div, is_view, viewer
from batch_layer.hashes import mark_repeated
from batch_layer.retries import REPEATED, id_hash, without_retries
from batch_layer.signals import AGENT, NEAR, address_signals, with_threshold_bunching
from batch_layer.totals import video_counts
from batch_layer.verdict import (
    STATIC_SIGNALS,
    is_flagged,
    is_near_threshold,
    is_replay_loop,
    reason_of,
    rejection_reason,
    signal_mask,
    with_static_signals,
)
from counting import rules
from counting.bots import BotFilter, shipped

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
    "signals",
    "flagged",
    "new_viewer",
    "new_viewer_day",
)


def _is_qualified() -> Column:
    """`rules.is_qualified_view` on a view: watched at least the minimum (NaN never qualifies)."""
    watched = F.coalesce(F.col("watch_secs"), F.lit(0.0))
    return (watched >= F.lit(rules.MIN_WATCH_SECS)) & ~F.isnan(watched)


_VIEWER_HASH = "_viewer_hash"
# Marks a view whose (video, viewer) may have other views (`hashes.mark_repeated` of `_pair_hash`).
_SHARED = "_shared"
_HYPOTHESES = {"human": False, "looping": True}  # the two values of the replay signal


def _pair_hash(viewer: Column) -> Column:
    """The 64-bit hash of a view's (video, viewer): the views' shuffle key, and what `_SHARED` marks."""
    return F.xxhash64(F.col("video_id"), viewer)


def _candidate(loop: bool) -> Column:
    return F.col(f"_candidate_{'looping' if loop else 'human'}")


# Marks a reaction row (a like, dislike or their undoing by a user), judged with the shared views.
_REACTION = "_reaction"


def _is_kept_reaction() -> Column:
    """Whether a row of the kept log is a reaction: `classify` keeps a user on reactions only."""
    return F.col("user_id").isNotNull()


# The person of a row: a view's viewer, a reaction's user.
_PERSON = "_person"


def _decided(rows: DataFrame, by_address: tuple[DataFrame, DataFrame], bot_filter: BotFilter) -> DataFrame:
    """The rows with what an outcome reads: the address signals (`_busy`, `_rotating`, from the
    views' `signals.address_signals`), whether the row is a reaction, its person (the viewer of a
    view, the user of a reaction), the hash of (video, person), and whether each view is a
    candidate (a qualified view the other signals do not reject) for both values of the replay
    signal. Only these columns cross the shuffle and fill the window buffers."""
    busy = F.coalesce(F.col("_busy"), F.lit(False))
    rotating = F.coalesce(F.col("_rotating"), F.lit(False))
    static, qualified = F.col(STATIC_SIGNALS), F.col("qualified")
    person = F.coalesce(F.col("viewer"), F.col("user_id"))
    busy_views, rotating_addresses = by_address
    joined = rows.join(busy_views, on=["ip", "ts"], how="left").join(
        rotating_addresses, on=["ip", "hour"], how="left"
    )
    return joined.select(
        "event_id",
        "type",
        "video_id",
        "viewer",
        _is_kept_reaction().alias(_REACTION),
        person.alias(_PERSON),
        "ts",
        "ingest_ts",
        "day",
        "view_window",
        STATIC_SIGNALS,
        "qualified",
        _SHARED,
        busy.alias("_busy"),
        rotating.alias("_rotating"),
        _pair_hash(person).alias(_VIEWER_HASH),
        *(
            (qualified & rejection_reason(static, busy, F.lit(loop), rotating, bot_filter).isNull()).alias(
                f"_candidate_{name}"
            )
            for name, loop in _HYPOTHESES.items()
        ),
    )


def _outcomes(decided: DataFrame, alone: bool, bot_filter: BotFilter) -> DataFrame:
    """`decided` rows with their outcome, reason, `new_viewer` and `new_viewer_day`: a view's; a
    reaction's state if it is its (user, video) pair's latest by `rules.reaction_order` (ts,
    event_id), else null (not with `alone`); for any other row (only with `alone`) a null outcome.
    Rows other than views get a null reason and two false flags.

    With `alone`, each view is the only one of its (video, viewer): no earlier view, one view
    that day. Otherwise the rows are shuffled by the hash of (video, person) and sorted by it,
    then (video, person, day, view window, ingestion order): with the hash first, almost every
    comparison of the sort is settled in its prefix array. Two window operators follow on that
    one order:

    - per (video, viewer, day): the views of the day (the replay signal) and, for each value of
      the replay signal (constant over a day), the latest view window before this view holding a
      candidate. A candidate is the first of its view window when no earlier candidate is in its
      window, and the first of its day when there is no earlier candidate at all; the replay
      signal then picks one of the two values.
    - per (video, viewer): whether an earlier day already brought a first counted view.

    Reactions share the shuffle and the sort (their person and a reaction mark are in the key, so
    they never meet the views): per (video, user), the greatest (ts, event_id) is the latest.
    """
    static, qualified = F.col(STATIC_SIGNALS), F.col("qualified")
    viewer_key = [_VIEWER_HASH, "video_id", _PERSON, _REACTION]
    order = [F.col("view_window"), F.col("ingest_ts").asc_nulls_first(), F.col("event_id")]
    in_day = Window.partitionBy(*viewer_key, "day").orderBy(*order)
    of_viewer = Window.partitionBy(*viewer_key).orderBy("day", *order)
    before = (Window.unboundedPreceding, -1)
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    nothing_earlier = F.lit(None).cast("long")
    signals = {
        **{
            f"_earlier_{name}": nothing_earlier
            if alone
            else F.max(F.when(_candidate(loop), F.col("view_window"))).over(in_day.rowsBetween(*before))
            for name, loop in _HYPOTHESES.items()
        },
        "_replay": is_replay_loop(
            F.lit(1) if alone else F.count(F.lit(1)).over(in_day.rowsBetween(*whole)), bot_filter
        ),
    }
    judged = (decided if alone else decided.repartition(_VIEWER_HASH)).withColumns(signals)
    judged = judged.withColumn(
        "signals", signal_mask(static, F.col("_busy"), F.col("_replay"), F.col("_rotating"))
    ).withColumn("reason", reason_of(F.col("signals"), bot_filter))
    reaction_order = F.struct("ts", "event_id")  # `rules.reaction_order`
    whole_pair = Window.partitionBy(*viewer_key)
    latest = F.lit(False) if alone else reaction_order == F.max(reaction_order).over(whole_pair)
    states = F.create_map(*(F.lit(item) for pair in rules.REACTION_STATE.items() for item in pair))

    def chosen(hypothesis: Callable[[bool, Column], Column]) -> Column:
        return F.when(F.col("_replay"), hypothesis(True, F.col("_earlier_looping"))).otherwise(
            hypothesis(False, F.col("_earlier_human"))
        )

    def first_of_window(loop: bool, earlier: Column) -> Column:
        return _candidate(loop) & F.coalesce(earlier < F.col("view_window"), F.lit(True))

    def first_of_day(loop: bool, earlier: Column) -> Column:
        return _candidate(loop) & earlier.isNull()

    outcomes = judged.withColumn(
        "outcome",
        F.when(F.col(_REACTION), F.when(latest, states[F.col("type")]))
        .when(~is_view(), F.lit(None).cast("string"))
        .when(~qualified, F.lit(SHORT))
        .when(F.col("reason").isNotNull(), F.lit(REJECTED))
        .when(chosen(first_of_window), F.lit(COUNTED))
        .otherwise(F.lit(REPEAT)),
    ).withColumn("new_viewer_day", is_view() & chosen(first_of_day))
    outcomes = outcomes.withColumn(
        "flagged", (F.col("outcome") == F.lit(COUNTED)) & is_flagged(F.col("signals"), bot_filter)
    )
    # The first view of the day that counted is the day's first candidate, so `new_viewer_day`
    # holds on one view per (video, viewer, day) with a counted view: the first such day's is new.
    earlier_day = (
        F.lit(None).cast("int")
        if alone
        else F.max(F.col("new_viewer_day").cast("int")).over(of_viewer.rowsBetween(*before))
    )
    return outcomes.withColumn(
        "new_viewer", F.col("new_viewer_day") & F.coalesce(earlier_day == 0, F.lit(True))
    )


def _judged(rows: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """Each row's outcome (`_outcomes`). A view's: short, rejected (as a bot) with its reason, a
    repeat within its window, or counted (the first qualified human view of its window by
    ingestion order), and whether it is the first counted view of its viewer for the video
    (`new_viewer`) and of that day (`new_viewer_day`). A reaction's: the state it leaves if it is
    its pair's latest, else null. Other rows pass with a null outcome.

    Most (video, viewer) pairs have one view (81 % of the views of the 10M benchmark), whose
    outcome needs no window: the views `_SHARED` marks (their pair's hash is seen on more than one
    row of the log, a retry's copies included) and the reactions are shuffled, sorted and windowed
    together; the others are judged alone. Each is one read of the kept log (a read deserializes
    every kept row).
    """
    together = (is_view() & F.col(_SHARED)) | _is_kept_reaction()
    by_address = address_signals(rows.where(is_view()), bot_filter)
    rows = with_threshold_bunching(rows, bot_filter).drop(AGENT)
    alone = _outcomes(
        _decided(rows.where(~together), by_address, bot_filter), alone=True, bot_filter=bot_filter
    )
    return alone.unionByName(
        _outcomes(_decided(rows.where(together), by_address, bot_filter), alone=False, bot_filter=bot_filter)
    )


def classify(events: DataFrame, bot_filter: BotFilter | None = None) -> DataFrame:
    """One row per deduplicated event with what it counts as: `outcome` (a view's outcome, a
    latest reaction's state, else null), `reason` of a rejected view (by the rules of
    `bot_filter`), `viewer`, `view_window`, `day`, and for counted views whether they bring a new
    viewer (`new_viewer`: of the video, `new_viewer_day`: of the video that day). The columns are
    `CLASSIFIED`. Without `bot_filter`, the rules shipped with Tally."""
    bot_filter = bot_filter or shipped()
    # The static bot signals are properties of a row: computed first, they let the wide columns
    # they read go before the shuffles. Only what the rules read crosses the deduplication.
    view = is_view()
    is_reaction = F.col("type").isin(*rules.REACTION_STATE) & F.col("user_id").isNotNull()
    # Which ids may have copies and which views may share their (video, viewer) with others: one
    # aggregate over the log before anything is kept, so the reads after test two columns.
    hashes = {REPEATED: id_hash(), _SHARED: F.when(view, _pair_hash(viewer()))}
    narrow = mark_repeated(with_static_signals(events, bot_filter), hashes).select(
        "event_id",
        "type",
        "video_id",
        F.when(is_reaction, F.col("user_id")).alias("user_id"),
        F.when(view, viewer()).alias("viewer"),
        F.when(view, F.col("ip")).alias("ip"),
        F.when(view & (F.length("user_agent") > 0), F.xxhash64("user_agent")).alias(AGENT),
        STATIC_SIGNALS,
        F.when(view, _is_qualified()).alias("qualified"),
        F.when(view, is_near_threshold(bot_filter)).alias(NEAR),
        "ts",
        "ingest_ts",
        "kafka_partition",
        "kafka_offset",
        REPEATED,
        F.when(view, F.col(_SHARED)).alias(_SHARED),
    )
    # The narrow log is kept: its marked rows are deduplicated, and it feeds the views, the reactions and
    # the other events. Kept serialized (one byte array per block, not an object per row), it
    # leaves the collector little to trace and copy: 10M events, GC 7.5 -> 2.3 s in all.
    kept = narrow.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    deduped = without_retries(kept).drop("kafka_partition", "kafka_offset")
    timed = (
        deduped.withColumn("minute", floor_div("ts", rules.MINUTE_MS))
        .withColumn("hour", floor_div("ts", rules.HOUR_MS))
        .withColumn("day", floor_div("ts", rules.DAY_MS))
        .withColumn("view_window", floor_div("ts", rules.VIEW_WINDOW_MS))
    )
    return _judged(timed, bot_filter).select(*CLASSIFIED)


def transform(events: DataFrame, bot_filter: BotFilter | None = None) -> DataFrame:
    """Log rows (the log's columns) -> per-video counts with the baseline's columns."""
    return video_counts(classify(events, bot_filter))
