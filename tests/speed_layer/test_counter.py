"""The pure planning of a micro-batch: verdicts from counting/ rules, keys, offsets, expiry times."""

from __future__ import annotations

from unittest import mock

import msgspec
import pytest

from counting import keys, rules
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer import script
from speed_layer.counter import plan_batch
from speed_layer.records import Record
from speed_layer.windows import ViewWindows
from tests.speed_layer.helpers import Traffic

NOW = 1_795_000_000_000


@pytest.fixture
def config(tmp_path: object) -> Settings:
    return Settings(bucket_ms=2_000, retention_ms=60_000)


def _record(events: list, offset: int = 0, partition: int = 0) -> Record:  # type: ignore[type-arg]
    return Record("events", partition, offset, encode_events(events))


def _kinds(records: list[Record], settings: Settings) -> list[int]:
    [write] = plan_batch(records, settings, ViewWindows(), NOW).writes
    return [int(op[1]) for op in write.ops]  # type: ignore[call-overload]


def test_each_event_type_becomes_its_operation(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    events = [
        t.view("v", "u1"),
        t.view("v", "u2", watch=10.0),
        t.view("v", "u3", user_agent="HeadlessChrome/120"),
        t.event("like", "v", user_id="u1"),
        t.event("heartbeat", "v", session_id="s1"),
    ]
    assert _kinds([_record(events)], config) == [
        script.VIEW,
        script.SHORT,
        script.REJECT,
        script.REACTION,
        script.HEARTBEAT,
    ]


def test_a_view_plan_names_its_keys_bucket_and_viewer(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    view = t.view("vid", None, session_id="sess")
    [write] = plan_batch([_record([view], offset=41)], config, ViewWindows(), NOW).writes
    [op] = write.ops
    bucket = rules.bucket_of(view.ingest_ts or 0, config.bucket_ms)
    window = rules.view_window_of(view.ts)
    named = [write.keys[int(i) - 1] for i in (op[2], op[4], op[5], op[7])]  # type: ignore[call-overload]
    assert named == [
        keys.event_marker("vid", view.event_id),
        keys.bucket_counts("vid", bucket),
        keys.window_marker("vid", "anon:sess", window),
        keys.viewers("vid"),
    ]
    assert op[0] == 41 and op[8] == "anon:sess"
    assert write.keys[0] == keys.partition_offset("events", 0)
    assert (write.first_offset, write.last_offset, write.videos) == (41, 41, ["vid"])
    bucket_end = (bucket + 1) * config.bucket_ms
    index = write.keys.index(keys.buckets_index("vid")) + 1
    assert write.buckets == [[op[4], index, str(bucket), str(bucket_end + config.retention_ms)]]


def test_the_bot_rejection_reason_comes_from_the_rules(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    with mock.patch("counting.bots.rejection_reason", return_value="replay_rate") as reason:
        [write] = plan_batch([_record([t.view("v", "u")])], config, ViewWindows(), NOW).writes
    assert reason.call_count == 1
    assert write.ops[0][1] == script.REJECT and write.ops[0][5] == "rejected:replay_rate"


def test_address_velocity_rejects_views_past_the_threshold(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    ts = NOW - 5_000
    burst = [t.view("v", f"u{i}", ip="81.1.1.1", ts=ts) for i in range(35)]
    kinds = _kinds([_record(burst)], config)
    assert kinds == [script.VIEW] * 30 + [script.REJECT] * 5


def test_a_retry_in_the_same_batch_is_not_counted_twice_by_the_windows(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    view = t.view("v", "u", ip="81.1.1.1")
    windows = ViewWindows()
    plan_batch([_record([view, t.retry(view)])], config, windows, NOW)
    assert windows.observe(view, count=False) == (1, 1)


def test_reactions_carry_ts_event_id_and_state(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    unlike = t.event("unlike", "v", user_id="u9", ts=NOW - 7)
    [write] = plan_batch([_record([unlike])], config, ViewWindows(), NOW).writes
    assert write.ops[0][6:] == ["u9", str(NOW - 7), unlike.event_id, rules.NONE]


def test_poison_records_are_dead_letters_inside_the_offset_range(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    good = _record([t.view("v", "u")], offset=3)
    junk = Record("events", 0, 4, b"\xff\x00junk")
    unstamped = Record(
        "events", 0, 5, msgspec.msgpack.encode([{"event_id": "x", "type": "view", "video_id": "v", "ts": 1}])
    )
    plan = plan_batch([junk, unstamped, good], config, ViewWindows(), NOW)
    assert [(r.offset, "ingest_ts" in e.reason) for r, e in plan.dead_letters] == [(4, False), (5, True)]
    [write] = plan.writes
    assert (write.first_offset, write.last_offset, write.records, write.events) == (3, 5, 3, 1)


def test_a_batch_of_only_poison_still_moves_the_offset(config: Settings) -> None:
    plan = plan_batch([Record("events", 2, 9, b"nope")], config, ViewWindows(), NOW)
    [write] = plan.writes
    assert (write.partition, write.last_offset, write.ops) == (2, 9, [])


def test_partitions_get_separate_plans(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    records = [
        _record([t.view("a", "u")], 0, 0),
        _record([t.view("b", "u")], 0, 1),
        _record([t.view("a", "w")], 1, 0),
    ]
    writes = plan_batch(records, config, ViewWindows(), NOW).writes
    assert [(w.partition, w.first_offset, w.last_offset) for w in writes] == [(0, 0, 1), (1, 0, 0)]


def test_marker_expiry_is_a_day_past_the_acceptance_horizon_and_never_before_tomorrow(
    config: Settings,
) -> None:
    t = Traffic(now_ms=NOW)
    fresh = t.view("v", "u", ts=NOW - 1_000)
    ancient = t.view("v", "w", ts=NOW - 40 * rules.DAY_MS)
    [write] = plan_batch([_record([fresh, ancient])], config, ViewWindows(), NOW).writes
    assert write.ops[0][3] == str(fresh.ts + 31 * rules.DAY_MS)
    assert write.ops[1][3] == str(NOW + rules.DAY_MS)


def test_heartbeats_update_presence_and_trim_it(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    beat = t.event("heartbeat", "v", session_id="s")
    [write] = plan_batch([_record([beat])], config, ViewWindows(), NOW).writes
    assert write.ops == [[0, script.HEARTBEAT, 2, "s", str(beat.ingest_ts)]]
    assert write.keys[1] == keys.presence("v")
    assert write.presence_trims == [[2, str((beat.ingest_ts or 0) - 10 * rules.PRESENCE_MS)]]
