"""Bot verdicts of views in Spark, with the rules of a `counting.bots.BotFilter` computed on the driver
once per distinct value, and the verdict of each signal mask once. Why and measured:
docs/decisions/0004-batch-jvm-settings.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from counting import bots
from counting.bots import BotFilter
from counting.rules import MIN_WATCH_SECS

STATIC_SIGNALS = "static_signals"

# Up to this many flagged values are matched with an IN list (a hash set); more are broadcast.
_MAX_IN_LIST = 10_000


def _flagged_values(
    views: DataFrame, rules: Mapping[str, tuple[str, Callable[[str], bool], Column]]
) -> dict[str, list[str]]:
    """Per signal, the values of its column for which its rule of `counting.bots` holds.

    `rules` maps a signal to its column, its rule and a necessary condition of the rule (values it
    cannot hold for are left out). One pass gathers the distinct combinations of the columns'
    values (few: agents, fingerprints, and the addresses in or near a range); each rule then runs
    on the driver once per value, so no Python worker runs and no row is shuffled for it. The
    combinations come from a code-generated hash aggregate, not from `collect_set` (see
    docs/decisions/0004-batch-jvm-settings.md).
    """
    columns: dict[str, Column] = {}
    for column, _, may_hold in rules.values():
        columns[column] = may_hold if column not in columns else columns[column] | may_hold
    candidates = views.select(*(F.when(held, F.col(c)).alias(c) for c, held in columns.items())).distinct()
    table = candidates.toArrow()
    values = {column: {v for v in table.column(column).to_pylist() if v is not None} for column in columns}
    return {signal: sorted(filter(check, values[column])) for signal, (column, check, _) in rules.items()}


def _is_in(column: str, values: list[str]) -> Column:
    """`F.col(column).isin(values)` made in one call to the JVM (`isin` makes one literal per value,
    each a round trip). The values travel as UTF-8 hex in one SQL expression, so no text of theirs
    is parsed as SQL."""
    return F.expr(f"`{column}` IN ({', '.join(map(_string_literal, values))})")


def _string_literal(value: str) -> str:
    """`value` as a SQL string literal written in UTF-8 hex, so none of its text is parsed as SQL."""
    return f"CAST(X'{value.encode().hex()}' AS STRING)"


def _flag(frame: DataFrame, column: str, flagged: list[str], name: str) -> tuple[DataFrame, Column]:
    """Whether the row's `column` is one of the `flagged` values (few: bots), as a Column over
    `frame`; with more values than an IN list holds, the frame comes back joined to them (the
    flag is then its column `name`)."""
    if not flagged:
        return frame, F.lit(False)
    if len(flagged) <= _MAX_IN_LIST:
        return frame, F.coalesce(_is_in(column, flagged), F.lit(False))
    spark = frame.sparkSession
    table = spark.createDataFrame([(v, True) for v in flagged], f"{column} string, {name} boolean")
    joined = frame.join(F.broadcast(table), on=column, how="left")
    return joined, F.coalesce(F.col(name), F.lit(False))


def _group_texts(first: int, last: int) -> set[str]:
    """Every way IPv6 text may write a first group from `first` to `last`: 1 to 4 hex digits with
    leading zeros, each letter in either case, and the empty text of `::` for a zero group."""
    texts = {""} if first == 0 else set()
    for group in range(first, last + 1):
        digits = f"{group:x}"
        for written in ("0" * pad + digits for pad in range(5 - len(digits))):
            texts.update(map("".join, itertools.product(*({c.lower(), c.upper()} for c in written))))
    return texts


def _may_be_datacenter_ip(ip: Column, bot_filter: BotFilter) -> Column:
    """A necessary condition of `is_datacenter_ip`, from the filter's data-centre ranges.

    An address Python's `ipaddress` accepts without `:` is IPv4 whose first octet is written in
    plain decimal; an IPv6 one starts with its first group in 1 to 4 hex digits (empty before
    `::`), and an IPv4-mapped one (`::ffff:0:0/96`) has a zero first group. So an address of a
    range starts with one of the range's first octets or first groups, or is IPv6 text whose first
    group is zero; every other value is left out. Both tests are set lookups of a short prefix of
    the text as written (no number parsing, no case mapping: Spark's `lower` sets up ICU): this
    runs on every view.
    """
    octets: set[str] = set()
    groups: set[str] = set()
    for network in bot_filter.datacenter.networks:
        first, last = int(network.network_address), int(network.broadcast_address)
        if network.version == 4:
            octets.update(str(octet) for octet in range(first >> 24, (last >> 24) + 1))
            groups.update(_group_texts(0, 0))  # IPv4-mapped
        else:
            groups.update(_group_texts(first >> 112, last >> 112))
    v6 = F.substring_index(ip, ":", 1).isin(sorted(groups))
    v4 = F.substring_index(ip, ".", 1).isin(sorted(octets))
    return F.when(ip.contains(":"), v6).otherwise(v4)


def _is_watch_anomaly(bot_filter: BotFilter) -> Column:
    """`is_watch_anomaly` as a Column: over the plausible maximum, or over the video's length."""
    watched, duration = F.col("watch_secs"), F.col("video_duration_secs")
    allowance = duration * F.lit(bot_filter.watch_overrun_factor) + F.lit(bot_filter.watch_overrun_slack_secs)
    over_length = watched > allowance
    too_long = watched > F.lit(bot_filter.max_watch_secs)
    return F.coalesce(too_long | over_length, too_long)


def _is_low_watch_ratio(bot_filter: BotFilter) -> Column:
    """`is_low_watch_ratio` as a Column (a NaN length or watch time never is, as in Python)."""
    watched, duration = F.col("watch_secs"), F.col("video_duration_secs")
    low = watched < duration * F.lit(bot_filter.min_watch_ratio)
    return F.coalesce(low & ~F.isnan(duration) & ~F.isnan(watched), F.lit(False))


def is_near_threshold(bot_filter: BotFilter) -> Column:
    """`is_near_threshold` as a Column: stopped within the bunching window past the counting
    threshold, before the video's end (a NaN watch time or length never is, as in Python)."""
    watched, duration = F.col("watch_secs"), F.col("video_duration_secs")
    past = (watched >= F.lit(MIN_WATCH_SECS)) & (watched < F.lit(bot_filter.near_threshold_below))
    before_end = duration.isNull() | (
        ~F.isnan(duration) & (watched < duration - F.lit(bot_filter.bunch_window_secs))
    )
    return F.coalesce(past & ~F.isnan(watched) & before_end, F.lit(False))


def is_bunched(near_views: Column, qualified_views: Column, bot_filter: BotFilter) -> Column:
    """`is_bunched` of a video's day: its views near the threshold among those long enough to count."""
    enough = near_views >= F.lit(bot_filter.bunch_min_views)
    return enough & (near_views >= F.lit(bot_filter.bunch_min_share) * qualified_views)


def with_bunching(static: Column, bunched: Column) -> Column:
    """A static signal mask with the threshold-bunching signal added where `bunched` holds."""
    return static + F.when(bunched, F.lit(bots.BIT[bots.THRESHOLD_BUNCHING])).otherwise(F.lit(0))


def _mask(flags: dict[str, Column]) -> Column:
    """The signal mask of boolean columns, one per signal name (a null flag is not set), with the
    bits of `bots.BIT`, as in the speed layer."""
    bits = (F.when(flag, F.lit(bots.BIT[name])).otherwise(F.lit(0)) for name, flag in flags.items())
    return reduce(lambda a, b: a + b, bits)


def with_static_signals(events: DataFrame, bot_filter: BotFilter) -> DataFrame:
    """Add `static_signals`: the mask of the signals a view shows on its own (agent, address,
    fingerprint, watch time); null for other rows.

    They are properties of the row alone, so they may be computed before deduplication; the
    columns they read (agent, fingerprint, duration) can then be dropped before any shuffle.
    """
    log_columns = events.columns
    rules = {
        bots.SCRIPTED_AGENT: ("user_agent", bot_filter.is_scripted_agent, F.lit(True)),
        bots.MISSING_AGENT: ("user_agent", bot_filter.is_missing_agent, F.lit(True)),  # blank ones
        bots.IMPOSSIBLE_AGENT: ("user_agent", bot_filter.is_impossible_agent, F.lit(True)),
        bots.BAD_TLS: ("ja3", bot_filter.is_bad_ja3, F.lit(True)),
        bots.DATACENTER_IP: (
            "ip",
            bot_filter.is_datacenter_ip,
            _may_be_datacenter_ip(F.col("ip"), bot_filter),
        ),
    }
    flagged = _flagged_values(events.where(F.col("type") == "view"), rules)  # the rows the signals matter for
    static: dict[str, Column] = {}
    for signal, (column, _, _) in rules.items():
        events, static[signal] = _flag(events, column, flagged[signal], f"_is_{signal}")
    static[bots.MISSING_AGENT] = static[bots.MISSING_AGENT] | F.col("user_agent").isNull()
    static[bots.WATCH_ANOMALY] = _is_watch_anomaly(bot_filter)
    static[bots.WATCH_RATIO] = _is_low_watch_ratio(bot_filter)
    # One projection adds the mask (each DataFrame step analyses the whole plan again); join
    # columns, if any, go with the columns of the log.
    return events.select(*log_columns, F.when(F.col("type") == "view", _mask(static)).alias(STATIC_SIGNALS))


def is_high_velocity(address_views: Column, bot_filter: BotFilter) -> Column:
    """`is_high_velocity` of the views from an address in 60 s."""
    return address_views > F.lit(bot_filter.max_views_per_address_minute)


def is_agent_rotation(address_agents: Column, bot_filter: BotFilter) -> Column:
    """`is_agent_rotation` of the distinct agents from an address in an hour."""
    return address_agents > F.lit(bot_filter.max_agents_per_address_hour)


def allowed_addresses(addresses: list[str], bot_filter: BotFilter) -> list[str]:
    """The addresses of the list that the filter's allow-list holds (no address signal for them)."""
    return sorted(ip for ip in set(addresses) if bot_filter.is_allowed_ip(ip))


def is_replay_loop(viewer_views: Column, bot_filter: BotFilter) -> Column:
    """`is_replay_loop` of the views of a video by a viewer in a day."""
    return viewer_views > F.lit(bot_filter.max_replays_per_day)


def signal_mask(static: Column, high_velocity: Column, replay_loop: Column, rotation: Column) -> Column:
    """A view's signal mask: its static mask (`with_static_signals`) and its three window signals."""
    window = {
        bots.ADDRESS_VELOCITY: high_velocity,
        bots.REPLAY_RATE: replay_loop,
        bots.AGENT_ROTATION: rotation,
    }
    return static + _mask(window)


def rejection_reason(
    static: Column, high_velocity: Column, replay_loop: Column, rotation: Column, bot_filter: BotFilter
) -> Column:
    """The reason a view is rejected as a bot view (null: it is not), from its static signal mask
    (`with_static_signals`) and its three window signals."""
    return reason_of(signal_mask(static, high_velocity, replay_loop, rotation), bot_filter)


def reason_of(mask: Column, bot_filter: BotFilter) -> Column:
    """The rejection reason of a signal mask (null: not rejected): the filter's `rejection_by_mask`."""
    reasons = mask_table(["" if reason is None else reason for reason in bot_filter.rejection_by_mask])
    return F.nullif(F.get(reasons, mask), F.lit(""))


def is_flagged(mask: Column, bot_filter: BotFilter) -> Column:
    """Whether a signal mask's score is in the soft band: the filter's `flagged_by_mask`."""
    flags = mask_table([str(flagged).lower() for flagged in bot_filter.flagged_by_mask], "boolean")
    return F.coalesce(F.get(flags, mask), F.lit(False))


# Separates the items of a `mask_table`'s text: no reason, boolean or number holds it.
_TABLE_SEPARATOR = ","


def mask_table(items: Sequence[str], cast: str = "string") -> Column:
    """An array literal indexed by a signal mask (a map literal is searched key by key, boxing each
    key): the items as one text split at commas, cast to `cast`'s elements. The optimizer folds it
    to one constant, where an `array(...)` of 2,048 items stays in the plan as 2,048 expressions
    that every later DataFrame step analyses again (docs/decisions/0004-batch-jvm-settings.md)."""
    held = next((item for item in items if _TABLE_SEPARATOR in item), None)
    if held is not None:
        raise ValueError(f"a mask table's item may not hold {_TABLE_SEPARATOR!r} (got {held!r})")
    table = F.split(F.lit(_TABLE_SEPARATOR.join(items)), _TABLE_SEPARATOR)
    return table if cast == "string" else table.cast(f"array<{cast}>")
