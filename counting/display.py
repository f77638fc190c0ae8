"""Readable counts ("1.2M views"): what viewers see beside the exact numbers.

The rule (English, short scale): below 1,000 the exact digits; from there two significant figures
and a unit, K (thousand), M (million), B (billion), T (trillion), with a point as the decimal mark
and no trailing ".0". Figures are cut, never rounded up, so a readable count never shows more than
the exact one: 1,999 is "1.9K", 999,999 is "990K" and only 1,000,000 is "1M" (a video is shown at
a step only once it reached it).
"""

from __future__ import annotations

UNITS = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))
SIGNIFICANT = 2


def readable(count: int) -> str:
    """`count` as a viewer reads it: "999", "1.2K", "12K", "120K", "1.2M", "1B"."""
    if count < 0:
        raise ValueError(f"a count is never negative (got {count}): check the merge that produced it")
    for size, unit in UNITS:
        if count >= size:
            digits = len(str(count))
            kept = count // 10 ** (digits - SIGNIFICANT)  # the first two figures, cut
            scaled = kept * 10 ** (digits - SIGNIFICANT) / size  # exact: a multiple of size / 10
            text = f"{scaled:.1f}".removesuffix(".0")
            return f"{text}{unit}"
    return str(count)
