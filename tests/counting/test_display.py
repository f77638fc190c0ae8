"""Readable counts: exact below a thousand, two significant figures cut (never rounded up) above."""

from __future__ import annotations

import pytest

from counting.display import readable


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0"),
        (7, "7"),
        (999, "999"),
        (1_000, "1K"),
        (1_049, "1K"),
        (1_234, "1.2K"),
        (1_999, "1.9K"),
        (12_345, "12K"),
        (99_999, "99K"),
        (123_456, "120K"),
        (999_999, "990K"),
        (1_000_000, "1M"),
        (1_250_000, "1.2M"),
        (10_000_000, "10M"),
        (987_654_321, "980M"),
        (1_000_000_000, "1B"),
        (25_000_000_000, "25B"),
        (3_400_000_000_000, "3.4T"),
        (999_000_000_000_000, "990T"),
    ],
)
def test_readable_counts(count: int, shown: str) -> None:
    assert readable(count) == shown


def test_a_readable_count_never_shows_more_than_the_count() -> None:
    units = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
    for count in [*range(0, 5_000, 7), *range(995_000, 1_005_000, 13), 10**9 - 1, 10**9]:
        text = readable(count)
        value = float(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        assert value <= count < value * 1.1 + 1, (count, text)


def test_a_negative_count_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match="got -1"):
        readable(-1)
