"""The pure planning of a micro-batch: verdicts from counting/ rules, keys, offsets, expiry times."""

from __future__ import annotations

import random

import msgspec
import pytest

from counting import bots, keys, rules
from counting.event import Event
from counting.settings import Settings
from counting.wire import encode_events
from speed_layer import script
from speed_layer.counter import (
    PRESENCE_KEEP_MS,
    event_markers_key,
    plan_batch,
    viewer_digest,
    window_viewers_key,
)
from speed_layer.hot import HotVideos
from speed_layer.plan import owner_key
from speed_layer.records import Record
from speed_layer.windows import ViewWindows
from tests.rulesfiles import BROWSER, IMPOSSIBLE_AGENT, threshold_gamed_views
from tests.speed_layer.helpers import Traffic

NOW = 1_795_000_000_000


@pytest.fixture
def config(tmp_path: object) -> Settings:
    return Settings(bucket_ms=2_000, retention_ms=60_000)


def _record(events: list[Event], offset: int = 0, partition: int = 0) -> Record:
    return Record("events", partition, offset, encode_events(events))


def _kinds(records: list[Record], settings: Settings) -> list[int]:
    [write] = plan_batch(records, settings, ViewWindows(), NOW).writes
    return [int(op[0]) for op in write.ops]  # type: ignore[call-overload]


def test_each_event_type_becomes_its_operation(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    events = [
        t.view("v", "u1"),
        t.view("v", "u2", watch=10.0),
        t.view("v", "u3", user_agent="HeadlessChrome/120"),
        t.event("like", "v", user_id="u1"),
        t.event("heartbeat", "v", session_id="s1"),
    ]
    [write] = plan_batch([_record(events)], config, ViewWindows(), NOW).writes
    assert [op[0] for op in write.ops] == [script.VIEW, script.SHORT, script.REJECT, script.REACTION]
    [video] = write.videos
    assert video[5] == [str(events[4].ingest_ts), "s1"]


def test_a_view_plan_names_its_keys_bucket_and_viewer(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    view = t.view("vid", None, session_id="sess")
    [write] = plan_batch([_record([view], offset=41)], config, ViewWindows(), NOW).writes
    [op] = write.ops
    kind, offset, marker, event_id, bucket_index, ingest_ts, window_index, viewer, digest = op
    bucket = rules.bucket_of(view.ingest_ts or 0, config.bucket_ms)
    window = rules.view_window_of(view.ts)
    assert (kind, offset, event_id, viewer) == (script.VIEW, 41, view.event_id, "anon:sess")
    assert ingest_ts == str(view.ingest_ts)
    assert digest == viewer_digest("anon:sess") and len(digest) == 16  # type: ignore[arg-type]
    assert write.markers[marker - 1][0] == event_markers_key("vid", view.ts // rules.DAY_MS)  # type: ignore[operator]
    assert write.markers[window_index - 1][0] == window_viewers_key("vid", window)  # type: ignore[operator]
    assert write.keys == [keys.partition_offset("events", 0), owner_key("events", 0)]
    assert (write.first_offset, write.last_offset) == (41, 41)
    assert [v[:4] for v in write.videos] == [
        ["vid", keys.viewers("vid"), keys.reactions("vid"), keys.presence("vid")]
    ]
    assert write.videos[0][7] + str(bucket) == keys.bucket_counts("vid", bucket)  # type: ignore[operator]
    assert write.videos[0][8] == keys.buckets_index("vid")
    bucket_end = (bucket + 1) * config.bucket_ms
    assert bucket_index == 1
    assert write.buckets == [
        [
            keys.bucket_counts("vid", bucket),
            keys.buckets_index("vid"),
            bucket,
            bucket_end + config.retention_ms,
            keys.viewers_sketch("vid", bucket),
            keys.trending(bucket),
            "vid",
            keys.viewers("vid"),
            bucket_end + config.retention_ms,
            bucket_end + config.retention_ms,
        ]
    ]


def test_marker_hash_keys_are_spelled_by_counting_keys() -> None:
    assert event_markers_key("v", 20_000) == "tally:{v}:e:20000"
    assert window_viewers_key("v", 7) == "tally:{v}:w:7"


def test_the_bot_rejection_reason_comes_from_the_rules(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    # Two weak signals: the rules' tie-break (the heavier one) names the reason.
    view = t.view("v", "u", ip="52.0.0.1", watch=5_000.0, ja3=sorted(bots.SHIPPED.bad_ja3)[0])
    [write] = plan_batch([_record([view])], config, ViewWindows(), NOW).writes
    reason = bots.SHIPPED.rejection_reason(bots.SHIPPED.signals_for(view, 1, 1))
    assert reason is not None
    assert write.ops[0][0] == script.REJECT and write.ops[0][6] == f"rejected:{reason}"


def test_verdicts_equal_the_rules_on_random_views(config: Settings) -> None:
    rng = random.Random(5)
    t = Traffic(now_ms=NOW, seed=5)
    agents = [None, "", "Mozilla/5.0 Firefox/131", "curl/8.1", "HeadlessChrome/120", "Googlebot/2.1"]
    agents += [IMPOSSIBLE_AGENT, *(f"{BROWSER} Build/{n}" for n in range(10))]  # rotation: 8 an hour
    addresses = [None, "81.2.3.4", "3.4.5.6", "52.1.1.1", "::ffff:52.1.2.3", "2600:1f00::1", "fe80::1"]
    events = [
        t.view(
            f"v{rng.randint(0, 2)}",
            f"u{rng.randint(0, 3)}",
            watch=rng.choice([30.4, 30.4, 31.0, 300.0, 800.0, 50_000.0]),
            user_agent=rng.choice(agents),
            ip=rng.choice(addresses),
            ja3=rng.choice([None, next(iter(bots.SHIPPED.bad_ja3)), "abc"]),
            ts=NOW - rng.randint(0, 120_000),
        )
        for _ in range(400)
    ]
    [write] = plan_batch([_record(events)], config, ViewWindows(), NOW).writes
    windows = ViewWindows()
    expected = []
    for event in events:
        address_views, viewer_views, address_agents = windows.observe(event)
        near = bots.SHIPPED.is_near_threshold(event.watch_secs, event.video_duration_secs)
        client = bots.SHIPPED.client_mask(event.user_agent, event.ip, event.ja3)
        weighed = not bots.SHIPPED.is_static_reject(client, event.watch_secs, event.video_duration_secs)
        near_views, qualified_views = windows.observe_qualified(event.ts, event.video_id, near, weighed)
        bunched = near and bots.SHIPPED.is_bunched(near_views, qualified_views)
        found = bots.SHIPPED.signals_for(event, address_views, viewer_views, bunched, address_agents)
        reason = bots.SHIPPED.rejection_reason(found)
        expected.append(script.VIEW if reason is None else f"rejected:{reason}")
    by_event = {op[3]: (op[0] if op[0] == script.VIEW else op[6]) for op in write.ops}
    assert [by_event[e.event_id] for e in events] == expected
    assert len(set(expected)) > 3
    assert f"rejected:{bots.THRESHOLD_BUNCHING}" in expected
    assert f"rejected:{bots.AGENT_ROTATION}" in expected
    assert f"rejected:{bots.IMPOSSIBLE_AGENT}" in expected


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
    assert windows.observe(view, count=False) == (1, 1, 1)


def test_reactions_carry_ts_event_id_and_state(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    unlike = t.event("unlike", "v", user_id="u9", ts=NOW - 7)
    [write] = plan_batch([_record([unlike])], config, ViewWindows(), NOW).writes
    [op] = write.ops
    assert op[3] == unlike.event_id
    assert op[5:] == [f"{unlike.ingest_ts}|a", "u9", NOW - 7, rules.NONE]


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
    fresh_op, ancient_op = write.ops
    day = fresh.ts // rules.DAY_MS
    horizon = 30 * rules.DAY_MS + rules.DAY_MS
    assert write.markers[fresh_op[2] - 1][1] == (day + 1) * rules.DAY_MS - 1 + horizon  # type: ignore[operator]
    assert write.markers[ancient_op[2] - 1][1] == NOW + rules.DAY_MS  # type: ignore[operator]
    window = rules.view_window_of(fresh.ts)
    assert write.markers[fresh_op[6] - 1][1] == (window + 1) * rules.VIEW_WINDOW_MS - 1 + horizon  # type: ignore[operator]


def test_heartbeats_keep_the_newest_beat_per_session_and_trim_once_a_minute(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    beats = [t.event("heartbeat", "v", session_id="s") for _ in range(3)]
    trims: dict[str, int] = {}
    [write] = plan_batch([_record(beats)], config, ViewWindows(), NOW, trims=trims).writes
    [video] = write.videos
    newest = max(b.ingest_ts or 0 for b in beats)
    assert video[5] == [str(newest), "s"]
    assert video[4] == newest - PRESENCE_KEEP_MS
    later = t.event("heartbeat", "v", session_id="s2")
    [again] = plan_batch([_record([later], offset=1)], config, ViewWindows(), NOW, trims=trims).writes
    assert again.videos[0][4] == 0


def test_plans_are_cut_by_events_at_record_boundaries(config: Settings) -> None:
    t = Traffic(now_ms=NOW)
    records = [_record([t.view("v", f"u{i}{j}") for j in range(3)], offset=i) for i in range(10)]
    writes = plan_batch(records, config, ViewWindows(), NOW, max_events=7).writes
    assert [(w.first_offset, w.last_offset, w.events) for w in writes] == [
        (0, 2, 9),
        (3, 5, 9),
        (6, 8, 9),
        (9, 9, 3),
    ]


def test_a_fast_video_gets_its_shard_count_raised(config: Settings) -> None:
    t = Traffic(now_ms=NOW, step_ms=0)
    hot = HotVideos(threshold=100, max_shards=4)
    first = [t.view("hot", f"u{i}") for i in range(150)] + [t.view("calm", "x")]
    plan = plan_batch([_record(first)], config, ViewWindows(), NOW, hot=hot)
    assert plan.hot == {}  # a first sample only opens the window
    t.clock += 1_000
    second = [t.view("hot", f"w{i}") for i in range(150)]
    plan = plan_batch([_record(second, offset=1)], config, ViewWindows(), NOW, hot=hot)
    assert plan.hot == {"hot": 2}
    assert plan.writes[-1].shards == [[keys.shards("hot"), 2, hot.ttl_ms]]


def test_shard_counts_double_at_most_once_a_second_up_to_the_cap() -> None:
    hot = HotVideos(threshold=100, max_shards=4)
    steps = [(0, 0, 500), (1_000, 1_000, 500), (2_000, 1_500, 500), (3_000, 2_500, 500), (4_000, 3_500, 500)]
    asked = [hot.observe({"v": n}, ingest_ms, now_ms).get("v") for ingest_ms, now_ms, n in steps]
    assert asked == [None, 2, 2, 4, 4]
    assert hot.observe({"v": 10}, 5_000, 4_500) == {}  # cooled down: no renewal


def test_views_gamed_past_the_threshold_are_rejected_once_the_window_shows_bunching(config: Settings) -> None:
    events = [e for e in threshold_gamed_views(NOW - rules.DAY_MS) if e.video_id == "vid-gamed"]
    [write] = plan_batch([_record(events)], config, ViewWindows(), NOW).writes
    verdicts = {op[3]: (op[0], op[6] if op[0] == script.REJECT else None) for op in write.ops}
    gamed = [verdicts[e.event_id] for e in events if (e.watch_secs or 0) < 31.0]
    humans = [verdicts[e.event_id] for e in events if (e.watch_secs or 0) >= 31.0]
    least = bots.SHIPPED.bunch_min_views  # 40 humans came first: the share is met from then on
    reject = (script.REJECT, f"rejected:{bots.THRESHOLD_BUNCHING}")
    assert gamed == [(script.VIEW, None)] * (least - 1) + [reject] * (len(gamed) - least + 1)
    assert humans == [(script.VIEW, None)] * 40
