"""The served counts: the baseline's and the speed layer's records of one video, merged."""

from __future__ import annotations

from counting.counts import VideoCounts
from serving_layer.merge import Stats, corrected_by_batch, merge
from serving_layer.speed import SpeedCounts, ViewsBefore
from warehouse.baseline import BaselineRow


def test_baseline_and_speed_are_the_one_counts_record() -> None:
    assert isinstance(BaselineRow("v1"), VideoCounts)
    assert isinstance(SpeedCounts(), VideoCounts)


def test_the_baseline_and_the_speed_deltas_add_up() -> None:
    base = BaselineRow("v1", views=10, likes=2, dislikes=1, unique_viewers=7, rejected={"scripted_agent": 3})
    speed = SpeedCounts(
        views=4,
        likes=1,
        unique_viewers=2,
        rejected={"scripted_agent": 1, "bad_ja3": 2},
        watching_now=3,
        buckets=2,
    )

    assert merge("v1", base, speed) == Stats(
        video_id="v1",
        views=14,
        likes=3,
        dislikes=1,
        unique_viewers=9,
        watching_now=3,
        rejected={"scripted_agent": 4, "bad_ja3": 2},
        approx=False,
    )
    assert base.rejected == {"scripted_agent": 3}  # the baseline row is left as it was


def test_a_sketched_video_answers_its_estimate_never_below_the_baseline() -> None:
    base = BaselineRow("v1", views=10, unique_viewers=7)

    assert merge("v1", base, SpeedCounts(viewers_estimate=5)).unique_viewers == 7
    assert merge("v1", base, SpeedCounts(unique_viewers=1, viewers_estimate=12)).unique_viewers == 12
    assert merge("v1", base, SpeedCounts(viewers_estimate=12)).approx


def test_either_side_may_be_missing() -> None:
    assert merge("v1", None, None) == Stats("v1", 0, 0, 0, 0, 0)
    assert merge("v1", BaselineRow("v1", views=3), None).views == 3
    assert merge("v1", None, SpeedCounts(views=2, watching_now=1)).views == 2


def test_the_correction_is_known_only_when_both_sides_judged_the_same_views() -> None:
    """The baseline judged 11 counted, 1 short and 33 rejected views before its cutoff."""
    base = BaselineRow("v1", views=11, short_views=1, rejected={"scripted_agent": 2, "address_velocity": 31})

    assert corrected_by_batch(base, SpeedCounts(before=ViewsBefore(views=41, judged=45))) == 30
    assert corrected_by_batch(base, SpeedCounts(before=ViewsBefore(views=10, judged=45))) == -1
    assert corrected_by_batch(base, SpeedCounts(before=ViewsBefore(views=30, judged=34))) is None  # expired
    assert corrected_by_batch(base, SpeedCounts()) is None  # the buckets before were not read
    assert corrected_by_batch(None, SpeedCounts(before=ViewsBefore())) is None  # no baseline
    assert corrected_by_batch(base, None) is None  # the speed layer unread
    assert merge("v1", base, SpeedCounts(before=ViewsBefore(views=41, judged=45))).corrected_by_batch == 30
