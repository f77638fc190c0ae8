"""The trending rules: places by views with ties by id, and the rise of a video against its past."""

from __future__ import annotations

import random

from counting import trends

MINUTE = 60_000


def test_places_count_the_videos_with_views_and_break_ties_by_id() -> None:
    views = {"a": 5, "b": 3, "c": 3, "d": 1}
    assert trends.ranking(views) == [("a", 5), ("b", 3), ("c", 3), ("d", 1)]
    assert trends.place_of("c", views) == trends.Place(3, 3, 4)
    assert trends.place_of("a", views) == trends.Place(5, 1, 4)
    assert trends.place_of("z", views) == trends.Place(0, None, 4)


def test_standings_place_every_video_as_place_of_does() -> None:
    rng = random.Random(7)
    views = {f"v{i:03d}": rng.choice([0, 1, 2, 2, 3, 5, 8, 40]) for i in range(300)}
    standings = trends.Standings(views)
    for video in [*views, "absent"]:
        assert standings.place(video) == trends.place_of(video, views), video
    assert standings.place("absent") == trends.Place(0, None, 300)


def test_window_views_sum_the_buckets_of_the_window_only() -> None:
    per_bucket = {"a": {1: 2, 2: 3, 5: 9}, "b": {0: 4}}
    assert trends.window_views(per_bucket, 1, 2) == {"a": 5}
    assert trends.window_views(per_bucket, 0, 5) == {"a": 14, "b": 4}


def test_a_video_rising_from_nothing_outranks_a_steady_one_and_smoothing_tames_tiny_ones() -> None:
    now = 10 * MINUTE - 1  # the end of bucket 9 of one-minute buckets
    first, last, base_first, base_last = trends.windows(now, MINUTE, 1, 6)
    assert (first, last, base_first, base_last) == (9, 9, 3, 8)
    recent = {"rising": 60, "steady": 60, "tiny": 2}
    baseline = {"steady": 6 * 60, "tiny": 0}

    found = trends.velocities(recent, baseline, now, MINUTE, 1, 6)

    assert [v.video_id for v in found] == ["rising", "tiny", "steady"]
    rising, tiny, steady = found
    assert rising.views_per_minute == 60.0 and rising.baseline_per_minute == 0.0
    assert rising.rise == (60 + trends.SMOOTHING_PER_MINUTE) / trends.SMOOTHING_PER_MINUTE
    assert steady.rise == 1.0
    assert tiny.rise == (2 + trends.SMOOTHING_PER_MINUTE) / trends.SMOOTHING_PER_MINUTE < rising.rise


def test_the_current_bucket_counts_only_the_minutes_gone() -> None:
    now = 9 * MINUTE + MINUTE // 2 - 1  # half of bucket 9 gone
    (fast,) = trends.velocities({"v": 30}, {}, now, MINUTE, 1, 6)
    assert fast.views_per_minute == 60.0
