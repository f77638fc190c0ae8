"""One record of a video's counts: the oracle answers it, and it cannot be changed once made."""

from __future__ import annotations

import dataclasses

import pytest

from counting import oracle
from counting.counts import COUNT_FIELDS, VideoCounts, added_rejected
from counting.event import Event

T0 = 1_767_225_600_000
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"


def _event(event_id: str, kind: str, **fields: object) -> Event:
    values: dict[str, object] = {
        "event_id": event_id,
        "type": kind,
        "video_id": "v1",
        "ts": T0,
        "ingest_ts": T0,
    }
    values.update(fields)
    return Event(**values)  # type: ignore[arg-type]


def test_the_counts_of_a_video_are_frozen() -> None:
    counts = VideoCounts(views=2)

    with pytest.raises(dataclasses.FrozenInstanceError):
        counts.views = 3  # type: ignore[misc]
    assert counts == VideoCounts(views=2)


def test_the_counts_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        VideoCounts(2)  # type: ignore[misc]


def test_the_plain_counts_by_name() -> None:
    counts = VideoCounts(views=5, likes=1, unique_viewers=4, short_views=2, flagged=1, rejected={"x": 3})

    assert counts.count_fields() == {
        "views": 5,
        "likes": 1,
        "dislikes": 0,
        "unique_viewers": 4,
        "short_views": 2,
        "repeat_views": 0,
        "flagged": 1,
    }
    assert tuple(counts.count_fields()) == COUNT_FIELDS


def test_rejected_views_of_two_sides_add_by_reason() -> None:
    first = {"scripted_agent": 2, "datacenter_ip": 1}

    assert added_rejected(first, {"datacenter_ip": 4, "bad_ja3": 1}) == {
        "scripted_agent": 2,
        "datacenter_ip": 5,
        "bad_ja3": 1,
    }
    assert first == {"scripted_agent": 2, "datacenter_ip": 1}  # neither side is changed


def test_the_oracle_answers_the_one_record() -> None:
    events = [
        _event("a", "view", user_id="u1", session_id="s1", watch_secs=45.0, user_agent=BROWSER),
        _event("b", "view", user_id="u2", session_id="s2", watch_secs=45.0, user_agent="curl/8.0"),
        _event("c", "view", session_id="s3", watch_secs=10.0, user_agent=BROWSER),
        _event("d", "like", user_id="u1"),
        _event("e", "heartbeat", video_id="v2", session_id="s4"),
    ]

    counts = oracle.count(events)

    assert counts == {
        "v1": VideoCounts(views=1, likes=1, unique_viewers=1, rejected={"scripted_agent": 1}, short_views=1),
        "v2": VideoCounts(),
    }
    assert all(type(c) is VideoCounts for c in counts.values())
    assert oracle.VideoCounts is VideoCounts  # still importable where the other layers import it
