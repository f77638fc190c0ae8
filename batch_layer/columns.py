"""The counting rules the batch's steps share, as Spark Column expressions built from the constants of
`counting.rules`: a view's outcomes, event and bucket numbers, the viewer."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from counting import rules

# What became of each deduplicated view (the `outcome` column); latest reactions carry their state.
SHORT = "short"
REJECTED = "rejected"
REPEAT = "repeat"
COUNTED = "counted"

ANON_PREFIX = rules.ANON_VIEWER_PREFIX


def floor_div(column: str, divisor: int) -> Column:
    """`column // divisor` exactly as Python computes it, for integers below 2**53."""
    value = F.col(column)
    # The numerator is an exact multiple of the divisor, so the double quotient is exact.
    return ((value - F.pmod(value, F.lit(divisor))) / F.lit(divisor)).cast("long")


def is_view() -> Column:
    """Whether the row is a view event."""
    return F.col("type") == F.lit("view")


def viewer() -> Column:
    """`rules.viewer_of`: the user, or the anonymous prefix and the session."""
    return F.coalesce(F.col("user_id"), F.concat(F.lit(ANON_PREFIX), F.col("session_id")))
