"""The value layouts: round trips, and a clear error for anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from counting import rules, values

reactions = st.builds(
    values.Reaction,
    ts=st.integers(0, 2**53),
    event_id=st.text(st.characters(codec="utf-8"), min_size=1, max_size=64),
    state=st.sampled_from([rules.LIKED, rules.DISLIKED, rules.NONE]),
    bucket=st.integers(0, 2**40),
)


@given(reactions)
def test_an_acknowledged_reaction_reads_back_as_written(reaction: values.Reaction) -> None:
    raw = values.encode_acknowledged(reaction).encode()
    assert values.decode_acknowledged(raw) == values.Reaction(reaction.ts, reaction.event_id, reaction.state)


@given(st.lists(reactions, min_size=1, max_size=8))
def test_a_reaction_history_reads_back_as_written(history: list[values.Reaction]) -> None:
    assert values.decode_history(values.encode_history(history)) == history


def test_latest_picks_the_reaction_by_ts_then_event_id() -> None:
    older = values.Reaction(5, "b", rules.LIKED, 9)
    tie_later_id = values.Reaction(6, "b", rules.NONE, 1)
    tie_earlier_id = values.Reaction(6, "a", rules.DISLIKED, 3)
    assert values.latest([older, tie_later_id, tie_earlier_id]) == tie_later_id
    assert values.latest([]) is None


@pytest.mark.parametrize(
    "raw",
    [b"\x94\x01\xa1a\xa5liked\x00", b"5|e1|maybe", b"not-a-reaction", b"\xff\xfe", b"x|e1|liked"],
)
def test_an_acknowledged_reaction_of_another_layout_is_refused_by_name(raw: bytes) -> None:
    with pytest.raises(values.UnknownLayout, match=r"acknowledged reaction.*layout 1"):
        values.decode_acknowledged(raw)


@pytest.mark.parametrize(
    "raw", [b"5|e1|liked", b"\x90", b"\x91\x93\x01\xa1a\xa5liked", b"\x91\x94\x01\xa1a\xa3meh\x00"]
)
def test_a_history_of_another_layout_is_refused_by_name(raw: bytes) -> None:
    with pytest.raises(values.UnknownLayout, match=r"counted reaction history.*layout 2"):
        values.decode_history(raw)
