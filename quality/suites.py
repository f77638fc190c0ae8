"""The Great Expectations suites, built in code from the counting constants: the raw log and the
batch outputs. Each expectation carries a description in plain words (what a failure reports)."""

from __future__ import annotations

import great_expectations as gx
import great_expectations.expectations as gxe
from great_expectations.expectations.row_conditions import Column

from counting import rules
from counting.event import EVENT_TYPES, MAX_AGE_MS, MAX_FUTURE_MS, REACTION_TYPES, SESSION_TYPES
from counting.event import VIDEO_ID_PATTERN as VIDEO_ID_REGEX
from warehouse.baseline import COUNT_COLUMNS, REJECTED_COLUMNS

RAW_LOG = "raw_log"
BATCH_BASELINE = "batch_baseline"
BATCH_DAILY = "batch_daily"

MAX_MILLIS = 2**53  # counting.event.Millis
MAX_SECONDS = 1e9  # counting.event.Seconds
# IPv4 or IPv6 text (the ingest API parsed it with `ipaddress`; this only catches garbage).
IP_REGEX = r"^[0-9A-Fa-f:.]{2,45}$"

# Columns the raw frame adds to the log's (quality.frames.raw_frame computes them).
FILE = "file"
SCHEMA_PROBLEM = "schema_problem"
TS_LEAD_MS = "ts_lead_ms"
INGEST_LAG_MS = "ingest_lag_ms"

# Columns the baseline frame adds to the baseline's (quality.frames.baseline_frame computes them).
JUDGED_VIEWS = "judged_views"
QUALIFIED_VIEWS = "qualified_views"
DAILY_VIEWS = "daily_views"
SERIES_VIEWS = "series_views"
PREVIOUS_VIEWS = "previous_views"


def _between(
    column: str, low: float | None, high: float | None, what: str, strict_min: bool = False
) -> gxe.Expectation:
    return gxe.ExpectColumnValuesToBeBetween(
        column=column, min_value=low, max_value=high, strict_min=strict_min, description=what
    )


def _present(column: str, what: str | None = None) -> gxe.Expectation:
    return gxe.ExpectColumnValuesToNotBeNull(column=column, description=what or f"{column} is present")


def _lengths(column: str, low: int, high: int) -> gxe.Expectation:
    return gxe.ExpectColumnValueLengthsToBeBetween(
        column=column, min_value=low, max_value=high, description=f"{column} is {low} to {high} characters"
    )


def raw_log_suite() -> gx.ExpectationSuite:
    """The raw Parquet log as the archiver writes it: the ingest API's field rules hold on every row,
    every file has the log's schema, and no row is in a file twice (see `quality.frames`)."""
    return _suite(
        RAW_LOG,
        gxe.ExpectColumnValuesToBeNull(
            column=SCHEMA_PROBLEM,
            description="every file has the log's columns with the log's types (counting.logschema)",
        ),
        _present("event_id"),
        _lengths("event_id", 1, 64),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[FILE, "kafka_partition", "kafka_offset", "event_id"],
            description="no row appears twice in one file (same Kafka record and event_id)",
        ),
        _present("type"),
        gxe.ExpectColumnValuesToBeInSet(
            column="type", value_set=list(EVENT_TYPES), description=f"type is one of {', '.join(EVENT_TYPES)}"
        ),
        _present("video_id"),
        gxe.ExpectColumnValuesToMatchRegex(
            column="video_id", regex=VIDEO_ID_REGEX, description=f"video_id matches {VIDEO_ID_REGEX}"
        ),
        _lengths("user_id", 1, 64),
        gxe.ExpectColumnValuesToNotBeNull(
            column="user_id",
            row_condition=Column("type").is_in(sorted(REACTION_TYPES)),
            description="user_id is present on every reaction (like, unlike, dislike, undislike)",
        ),
        _lengths("session_id", 1, 64),
        gxe.ExpectColumnValuesToNotBeNull(
            column="session_id",
            row_condition=Column("type").is_in(sorted(SESSION_TYPES)),
            description="session_id is present on every view and heartbeat",
        ),
        _present("ts", "event time ts is present"),
        _between("ts", 0, MAX_MILLIS, "event time ts is a millisecond time since the epoch"),
        _between(
            TS_LEAD_MS,
            -MAX_AGE_MS,
            MAX_FUTURE_MS,
            "event time ts is at most 24 h after its ingestion and at most 30 days before it",
        ),
        gxe.ExpectColumnValuesToMatchRegex(
            column="ip", regex=IP_REGEX, description="ip is IPv4 or IPv6 text"
        ),
        _lengths("user_agent", 0, 512),
        _between("watch_secs", 0, MAX_SECONDS, "watch_secs is a number of seconds >= 0"),
        gxe.ExpectColumnValuesToBeNull(
            column="watch_secs",
            row_condition=Column("type") != "view",
            description="watch_secs is only set on views",
        ),
        _between("video_duration_secs", 0, MAX_SECONDS, "video_duration_secs is > 0", strict_min=True),
        _lengths("ja3", 0, 64),
        _present("ingest_ts", "ingestion time ingest_ts is present"),
        _between(
            "ingest_ts", 0, MAX_MILLIS, "ingestion time ingest_ts is a millisecond time since the epoch"
        ),
        _between(
            INGEST_LAG_MS,
            0,
            None,
            "no row sits in a partition of an hour after its ingestion (the batch would never read it)",
        ),
        _present("kafka_partition"),
        _between("kafka_partition", 0, None, "kafka_partition is >= 0"),
        _present("kafka_offset"),
        _between("kafka_offset", 0, None, "kafka_offset is >= 0"),
    )


def _suite(name: str, *expectations: gxe.Expectation) -> gx.ExpectationSuite:
    """A suite built whole. Not `add_expectation` one at a time: once a suite of that name is in the
    context's store (every run after the first), each addition saves the whole suite again."""
    return gx.ExpectationSuite(name=name, expectations=list(expectations))


def _counts_not_negative(columns: tuple[str, ...]) -> list[gxe.Expectation]:
    return [
        expectation
        for column in columns
        for expectation in (_present(column), _between(column, 0, None, f"{column} is not negative"))
    ]


def _uniques_within_views() -> gxe.Expectation:
    return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="views",
        column_B="unique_viewers",
        or_equal=True,
        description="unique_viewers <= views",
    )


def batch_baseline_suite(check_growth: bool) -> gx.ExpectationSuite:
    """A run's baseline, one row per video, with columns derived from the log, the run's other
    outputs and the served baseline. `check_growth`: views must not fall below the served ones
    (only when both count with the same rules and the run's cutoff is not earlier)."""
    growth = gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="views",
        column_B=PREVIOUS_VIEWS,
        or_equal=True,
        description=(
            "views never fall below the served baseline's but by views the rules took back "
            "(refused now, counted then); any other fall is a lost event: find it, or after a "
            "repair publish with allow_decrease_reason (tally batch run --allow-decrease)"
        ),
    )
    return _suite(
        BATCH_BASELINE,
        _present("video_id"),
        gxe.ExpectColumnValuesToBeUnique(column="video_id", description="one row per video"),
        *_counts_not_negative(COUNT_COLUMNS + REJECTED_COLUMNS),
        _uniques_within_views(),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A=JUDGED_VIEWS,
            column_B=QUALIFIED_VIEWS,
            description=(
                "rejected + counted (+ repeat) views = the qualified views in the log "
                f"(distinct view ids watched >= {rules.MIN_WATCH_SECS:g} s)"
            ),
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="views", column_B=DAILY_VIEWS, description="the daily output's views add up to views"
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="views",
            column_B=SERIES_VIEWS,
            description="the per-bucket output's views add up to views",
        ),
        *([growth] if check_growth else []),
    )


def batch_daily_suite(run_id: str, rules_version: str) -> gx.ExpectationSuite:
    """A run's per-day per-video counts: one row per (date, video), no negative counts, the run's
    id and rules version on every row."""
    return _suite(
        BATCH_DAILY,
        _present("date"),
        _present("video_id"),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["date", "video_id"], description="one row per day and video"
        ),
        *_counts_not_negative(COUNT_COLUMNS + REJECTED_COLUMNS),
        _uniques_within_views(),
        gxe.ExpectColumnValuesToBeInSet(
            column="run_id", value_set=[run_id], description=f"run_id is {run_id!r}"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="rules_version",
            value_set=[rules_version],
            description=f"rules_version is {rules_version!r}",
        ),
    )
