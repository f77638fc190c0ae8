"""The viewers' first buckets held to a dict of the same: micro-batches of lookups and writes (a first
bucket only moves earlier, as the state moves it), a replica restored from the changes, a snapshot's
records, a video's selection and the count of each video's viewers, in any order hypothesis finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from counting import rules
from speed_layer.state.firsts import FirstsTable, as_entry, first_key, viewers_in

VIDEOS = ["v1", "v2", "v3"]
# A micro-batch of views: (video, viewer number, bucket).
views = st.lists(
    st.tuples(st.sampled_from(VIDEOS), st.integers(0, 40), st.integers(29_000, 29_060)), max_size=40
)


def _digest(n: int) -> str:
    return rules.viewer_digest(f"u{n}")


def _held(table: FirstsTable) -> dict[tuple[str, str], int]:
    """Every (video, digest) -> first bucket the table holds, by way of its snapshot's records."""
    return {(video, digest): bucket for video, digest, bucket in viewers_in(table.entry_of(table.rows()))}


@settings(max_examples=80, deadline=None)
@given(st.lists(views, max_size=12))
def test_the_table_answers_as_a_dict_of_the_first_buckets(batches: list[list[tuple[str, int, int]]]) -> None:
    table = FirstsTable()
    replica = FirstsTable()  # restored from the changes only
    model: dict[tuple[str, str], int] = {}
    for batch in batches:
        table.fetch([first_key(video, _digest(n)) for video, n, _ in batch])
        for video, n, bucket in batch:
            digest = _digest(n)
            key = first_key(video, digest)
            first = table.first(key)
            assert first == model.get((video, digest))
            if first is None or bucket < first:
                table.set(key, bucket, video, digest, first is None)
                model[(video, digest)] = bucket
            assert table.first(key) == model[(video, digest)]
        replica.load(table.take_changes())
        assert _held(replica) == model
    assert _held(table) == model
    counted = {video: sum(1 for v, _ in model if v == video) for video in VIDEOS}
    assert table.viewers_of == replica.viewers_of == {v: n for v, n in counted.items() if n}
    restored = FirstsTable()  # from a snapshot's records
    restored.load(table.entry_of(table.rows()))
    assert sorted(restored.items()) == sorted(table.items())
    assert restored.viewers_of == table.viewers_of
    for video in VIDEOS:
        selected = {(v, d): b for v, d, b in viewers_in(table.entry_of(table.of_video(video)))}
        assert selected == {k: b for k, b in model.items() if k[0] == video}


def test_first_buckets_go_through_an_entry_unchanged() -> None:
    firsts = [("v2", _digest(n), 29_000 + n) for n in range(3)] + [("v1", _digest(9), 29_009)]
    assert sorted(viewers_in(as_entry(firsts))) == sorted(firsts)
    assert int(firsts[0][1][:8], 16) == rules.viewer_route(
        firsts[0][1]
    )  # a route is a digest's first 32 bits


def test_a_viewer_taken_over_twice_counts_once() -> None:
    table = FirstsTable()
    entry = as_entry([("v1", _digest(1), 29_000), ("v1", _digest(2), 29_001)])
    table.load(entry, changed=True)
    table.load(entry, changed=True)
    assert table.viewers_of == {"v1": 2}
    assert table.first(first_key("v1", _digest(2))) == 29_001
    taken = [("v1", _digest(1), 29_000), ("v1", _digest(2), 29_001)]
    assert sorted(viewers_in(table.take_changes())) == sorted(taken)
