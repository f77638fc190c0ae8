"""The merge of regions' components and of reaction events (decision 0006): idempotent, commutative
and associative, so any delivery order, duplicates and delays end in the same state: the last
component of every partition's part, and the oracle's reaction counts."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from counting import oracle
from counting.errors import InvalidSetting
from counting.event import Event
from counting.regions import (
    Component,
    Exchange,
    check_region,
    decode_exchange,
    encode_exchange,
    latest_reactions,
    merge,
    parse_peers,
    served_fields,
)

FIELDS = ("views", "uniques", "short_views", "likes")


@st.composite
def histories(draw: st.DrawFn) -> list[list[Component]]:
    """For a few identities, the successive components their partition publishes (offsets grow;
    a value may go down: a view moved to an earlier bucket)."""
    found = []
    identities = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["eu", "us", "ap"]),
                st.integers(0, 2),
                st.sampled_from(["v1", "v2", ""]),
                st.integers(0, 3),
            ),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    for region, partition, video, bucket in identities:
        offsets = sorted(draw(st.sets(st.integers(0, 1_000), min_size=1, max_size=5)))
        found.append(
            [
                Component(
                    region,
                    "events",
                    partition,
                    video,
                    bucket,
                    offset,
                    draw(st.dictionaries(st.sampled_from(FIELDS), st.integers(-5, 50), max_size=4)),
                    sorted(draw(st.sets(st.sampled_from(["d1", "d2", "d3"]), max_size=3))),
                    sorted(draw(st.sets(st.sampled_from(["d1", "d4"]), max_size=2))),
                )
                for offset in offsets
            ]
        )
    return found


def _delivered(history: list[list[Component]], rng: random.Random) -> list[Component]:
    """What a region receives: some of each part's components, always its last one (the exchange
    retries until it arrives), each possibly twice, in any order."""
    out = []
    for part in history:
        chosen = [c for c in part[:-1] if rng.random() < 0.5] + [part[-1]]
        out += chosen + [c for c in chosen if rng.random() < 0.3]
    rng.shuffle(out)
    return out


@settings(max_examples=150, deadline=None)
@given(histories(), st.randoms(use_true_random=False))
def test_any_order_with_duplicates_and_delays_ends_at_each_parts_last_component(
    history: list[list[Component]], rng: random.Random
) -> None:
    delivered = _delivered(history, rng)
    final = {  # the last counts, and every digest any delivered component carried
        part[-1].identity: msgspec.structs.replace(
            part[-1],
            sketches=sorted({d for c in delivered if c.identity == part[-1].identity for d in c.sketches}),
            firsts=sorted({d for c in delivered if c.identity == part[-1].identity for d in c.firsts}),
        )
        for part in history
    }
    assert merge({}, delivered) == final
    split = rng.randrange(len(delivered) + 1)  # a delay: part now, the rest later
    assert merge(merge({}, delivered[split:]), delivered[:split]) == final
    assert merge(merge({}, delivered), delivered) == final  # idempotent


@settings(max_examples=150, deadline=None)
@given(st.lists(histories(), min_size=3, max_size=3), st.randoms(use_true_random=False))
def test_merging_is_associative_and_commutative(
    three: list[list[list[Component]]], rng: random.Random
) -> None:
    a, b, c = ([x for part in h for x in part] for h in three)
    left = merge(merge(merge({}, a), b), c)
    right = merge(merge({}, a), merge(merge({}, b), c).values())
    swapped = merge(merge(merge({}, c), a), b)
    assert left == right == swapped


def test_two_components_of_one_offset_merge_to_the_same_one_either_way() -> None:
    one = Component("eu", "events", 0, "v1", 3, 7, {"views": 2})
    other = Component("eu", "events", 0, "v1", 3, 7, {"views": 3})
    assert merge({}, [one, other]) == merge({}, [other, one])


def _reactions(seed: int, n: int) -> list[Event]:
    rng = random.Random(seed)
    kinds = ["like", "unlike", "dislike", "undislike"]
    return [
        Event(
            event_id=f"r{seed}-{i}",
            type=rng.choice(kinds),  # type: ignore[arg-type]
            video_id=rng.choice(["v1", "v2"]),
            ts=1_800_000_000_000 + rng.randrange(50) * 1_000,  # ties of ts: event_id decides
            user_id=rng.choice(["u1", "u2", "u3", "u4"]),
            ingest_ts=1_800_000_100_000 + i,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("seed", range(8))
def test_reactions_merged_in_any_order_give_the_oracles_likes_and_dislikes(seed: int) -> None:
    events = _reactions(seed, 60)
    expected = oracle.count(events)
    rng = random.Random(seed)
    regions = [events[i::3] for i in range(3)]  # each region accepted a third
    delivered = [e for region in regions for e in region] + rng.sample(events, 10)
    rng.shuffle(delivered)
    half = len(delivered) // 2
    merged = latest_reactions(latest_reactions({}, delivered[half:]), delivered[:half])
    for video, counts in expected.items():
        states = [e.type for (_, v), e in merged.items() if v == video]
        assert (states.count("like"), states.count("dislike")) == (counts.likes, counts.dislikes)


def test_components_cross_the_wire_unchanged_and_keep_their_reactions_home() -> None:
    component = Component("eu", "events", 2, "v1", 9, 41, {"views": 4, "likes": 1}, ["d1"])
    reaction = _reactions(1, 1)[0]
    exchange = Exchange([component], [reaction])
    assert decode_exchange(encode_exchange(exchange)) == exchange
    assert served_fields(component) == {"views": 4}


@pytest.mark.parametrize("name", ["", "EU", "eu west", "1eu", "x" * 33])
def test_a_bad_region_name_is_refused_naming_the_setting(name: str) -> None:
    with pytest.raises(InvalidSetting, match=f"TALLY_REGION: {name!r} is not a region name"):
        check_region(name)


def test_peers_are_read_and_a_bad_one_is_refused_naming_it() -> None:
    assert parse_peers(" us=10.0.0.7:9092, ap=h:1 ", "eu") == {"us": "10.0.0.7:9092", "ap": "h:1"}
    for bad, reason in [
        ("us", "'us' is not region=host:port"),
        ("us=h", "'us=h' is not region=host:port"),
        ("US=h:1", "TALLY_REGION_PEERS: 'US' is not a region name"),
        ("eu=h:1", "names this region"),
    ]:
        with pytest.raises(InvalidSetting, match=reason):
            parse_peers(bad, "eu")
