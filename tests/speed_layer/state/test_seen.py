"""The markers' table held to a dict of the same markers: micro-batches of lookups and writes (a
marker only ever moves to an earlier copy, as the state moves it), restores from its changes, trims
and a video's selection, in any order hypothesis finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer.state.seen import ROW, SeenTable, fingerprint, video_tag

HORIZON = 4_000
T0 = 1_790_000_000_000

# A step: a micro-batch of writes (event number, ingest time offset, code, route, video) or a trim
# at an ingest time offset.
writes = st.lists(
    st.tuples(
        st.integers(0, 60),
        st.integers(0, 20_000),
        st.integers(0, 13),
        st.integers(0, 2**32 - 1),
        st.sampled_from(["v1", "v2", "v3"]),
    ),
    max_size=40,
)
steps = st.lists(st.one_of(writes, st.integers(0, 20_000)), max_size=25)


def _fp(n: int, video: str) -> int:
    return fingerprint(video, f"e{n}")


@settings(max_examples=80, deadline=None)
@given(steps)
def test_the_table_answers_as_a_dict_of_the_markers_kept(
    script: list[list[tuple[int, int, int, int, str]] | int],
) -> None:
    table = SeenTable(HORIZON)
    model: dict[int, tuple[int, int, int, int]] = {}
    replica = SeenTable(HORIZON)  # restored from the changes only
    for step in script:
        if isinstance(step, int):
            floor = T0 + step
            table.trim(floor)
            # What a trim may drop: markers first set in a slab (a quarter horizon) ending by `floor`;
            # it keeps every marker set at or after the floor.
            kept = {fp for fp, _ in table.markers()}
            assert all(fp in kept for fp, m in model.items() if m[0] >= floor)
            model = {fp: m for fp, m in model.items() if fp in kept}
            continue
        table.fetch([_fp(n, video) for n, *_, video in step])
        for n, at, code, route, video in step:
            fp = _fp(n, video)
            assert table.get(fp) == model.get(fp)
            if fp in model and T0 + at >= model[fp][0]:
                continue  # as the state does: a marker only moves to an earlier copy
            model[fp] = (T0 + at, code, route, video_tag(video))
            table.put(fp, T0 + at, code, route, video_tag(video))
            assert table.get(fp) == model[fp]
        replica.load(table.take_changes())
    assert dict(table.markers()) == model
    assert len(table) == len(model)
    restored = {fp: m for fp, m in replica.markers() if fp in model}
    assert restored == model  # the changes restore every marker kept (and maybe some trimmed)
    for video in ("v1", "v2"):
        chosen = table.of_video(video_tag(video))
        assert chosen.dtype == ROW
        assert {int(fp) for fp in chosen["fp"]} == {fp for fp, m in model.items() if m[3] == video_tag(video)}


def test_a_marker_outside_a_fetched_batch_is_looked_up_alone() -> None:
    table = SeenTable(HORIZON)
    table.put(_fp(1, "v1"), T0, 1, 7, video_tag("v1"))
    table.flush()
    assert table.get(_fp(1, "v1")) == (T0, 1, 7, video_tag("v1"))
    assert table.get(_fp(2, "v1")) is None


def test_a_table_grows_past_its_first_capacity_and_finds_every_marker() -> None:
    table = SeenTable(HORIZON)
    fps = [_fp(n, "v1") for n in range(5_000)]
    table.fetch(fps)
    for n, fp in enumerate(fps):
        table.put(fp, T0 + n % 100, 1, n, 0)
    table.flush()
    table.fetch([*fps, _fp(9_999, "v1")])
    assert [table.get(fp)[2] for fp in fps] == list(range(5_000))  # type: ignore[index]
    assert table.get(_fp(9_999, "v1")) is None
