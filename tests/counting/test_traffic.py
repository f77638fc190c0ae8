"""The traffic generator: deterministic, valid, humans never look like bots, bots are caught."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from counting import bots, oracle, rules, traffic
from counting.errors import InvalidSetting
from counting.event import VIDEO_ID_PATTERN, Event, parse_event, stamped
from counting.traffic import Generated, TrafficConfig

CLEAN = TrafficConfig(seed=7, videos=120, viewers=3_000, events=30_000, rate=300.0)
# Slow enough that velocity and replay-loop bursts fit in the run many times over.
# The bot kinds whose signal every one of their views shows (threshold gamers show it once their
# video's day bunches).
PER_VIEW_KINDS = tuple(k for k in traffic.BOT_KINDS if k != traffic.THRESHOLD_GAMER)
EXAMPLES = settings(max_examples=10, deadline=None)
MIXED = TrafficConfig(seed=11, videos=150, viewers=4_000, events=40_000, rate=150.0, bot_fraction=0.1)
# A few viewers watching at a high rate: their homes' addresses run at the velocity limit.
CROWDED = TrafficConfig(seed=4, videos=40, viewers=20, events=20_000, rate=100.0, bot_fraction=0.1)


def _stamped(config: TrafficConfig, items: list[Generated]) -> list[Event]:
    """Each event validated as the ingest API would at its send time, then stamped with it."""
    encoder = msgspec.json.Encoder()
    events = []
    for item in items:
        now = config.start_ms + item.send_at_ms
        events.append(stamped(parse_event(encoder.encode(item.event), now), now))
    return events


@pytest.fixture(scope="module")
def clean() -> list[Generated]:
    return list(traffic.generate(CLEAN))


@pytest.fixture(scope="module")
def mixed() -> list[Generated]:
    return list(traffic.generate(MIXED))


def test_the_same_seed_gives_the_same_traffic(clean):
    again = list(traffic.generate(CLEAN))
    other = list(traffic.generate(TrafficConfig(**{**CLEAN.__dict__, "seed": CLEAN.seed + 1})))

    assert again == clean
    assert [i.event for i in other[:500]] != [i.event for i in clean[:500]]


def test_the_event_count_and_send_order(clean):
    sends = [item.send_at_ms for item in clean]

    assert len(clean) == CLEAN.events
    assert sends == sorted(sends)
    assert sends[0] >= 0


def test_every_event_is_valid_at_its_send_time_and_carries_no_ingest_ts(clean, mixed):
    assert len(_stamped(CLEAN, clean)) == len(clean)
    assert len(_stamped(MIXED, mixed)) == len(mixed)
    assert not any("ingest_ts" in item.event for item in clean + mixed)


def test_event_ids_are_unique_except_retries_which_repeat_the_event_exactly(mixed):
    first: dict[str, Generated] = {}
    for item in mixed:
        seen = first.setdefault(item.event["event_id"], item)
        if seen is not item:
            assert item.retry
            assert item.event == seen.event
            assert item.label == seen.label
            assert item.send_at_ms > seen.send_at_ms
    assert sum(item.retry for item in mixed) == len(mixed) - len(first)


def test_retries_late_events_refreshes_and_reaction_churn_are_present(clean):
    truth = traffic.ground_truth(clean)
    kinds = Counter(item.event["type"] for item in clean)
    late = [item for item in clean if item.late]
    delays = [CLEAN.start_ms + item.send_at_ms - item.event["ts"] for item in late]

    assert truth["retries"] > 0.01 * len(clean)
    assert truth["late_events"] > 0.01 * len(clean)
    assert min(delays) > traffic.LATE_MS
    assert max(delays) < 24 * 3_600_000
    assert set(kinds) == {"view", "heartbeat", "like", "unlike", "dislike", "undislike"}


def test_refreshes_and_rewatches_are_present(clean):
    counts = oracle.count(_stamped(CLEAN, clean))

    assert sum(c.repeat_views for c in counts.values()) > 0
    assert sum(c.short_views for c in counts.values()) > 0


def test_clean_traffic_has_no_bot_rejection(clean):
    verdicts = oracle.view_verdicts(oracle.dedup(_stamped(CLEAN, clean)))

    assert {item.label for item in clean} == {traffic.HUMAN}
    assert len(verdicts) > 1_000
    assert [reason for _, reason in verdicts if reason is not None] == []


def test_humans_look_like_browsers_at_home(clean):
    events = [item.event for item in clean]

    assert not any(bots.SHIPPED.is_scripted_agent(e["user_agent"]) for e in events)
    assert not any(bots.SHIPPED.is_datacenter_ip(e["ip"]) for e in events)
    assert not any(bots.SHIPPED.is_bad_ja3(e["ja3"]) for e in events)
    assert not any(
        bots.SHIPPED.is_watch_anomaly(e.get("watch_secs"), e.get("video_duration_secs")) for e in events
    )
    assert any(":" in e["ip"] for e in events)
    assert all(e["type"] not in ("like", "unlike", "dislike", "undislike") or "user_id" in e for e in events)


def test_the_oracle_catches_the_bots_and_spares_the_humans(mixed):
    label = {item.event["event_id"]: item.label for item in mixed}
    verdicts = oracle.view_verdicts(oracle.dedup(_stamped(MIXED, mixed)))
    bot_views = [reason for event, reason in verdicts if label[event.event_id] != traffic.HUMAN]
    human_views = [reason for event, reason in verdicts if label[event.event_id] == traffic.HUMAN]
    recall = sum(r is not None for r in bot_views) / len(bot_views)
    false_positive = sum(r is not None for r in human_views) / len(human_views)
    print(f"bot views rejected: {recall:.2%} of {len(bot_views)}")
    print(f"human views rejected: {false_positive:.2%} of {len(human_views)}")

    assert recall >= 0.98
    assert false_positive <= 0.005


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    late_rate=st.sampled_from([0.0, 0.5, 1.0]),
    retry_rate=st.sampled_from([0.0, 0.3]),
)
def test_for_any_seed_events_are_valid_and_only_bots_are_rejected(seed, late_rate, retry_rate):
    config = TrafficConfig(
        seed=seed,
        videos=30,
        viewers=200,
        events=3_000,
        rate=20.0,
        bot_fraction=0.2,
        bot_kinds=PER_VIEW_KINDS,
        late_rate=late_rate,
        retry_rate=retry_rate,
    )
    items = list(traffic.generate(config))
    label = {item.event["event_id"]: item.label for item in items}

    verdicts = oracle.view_verdicts(oracle.dedup(_stamped(config, items)))

    assert len(items) == config.events
    assert all((reason is None) == (label[e.event_id] == traffic.HUMAN) for e, reason in verdicts)


def test_each_bot_kind_trips_its_own_signal(mixed):
    label = {item.event["event_id"]: item.label for item in mixed}
    verdicts = oracle.view_verdicts(oracle.dedup(_stamped(MIXED, mixed)))
    reasons = Counter((label[e.event_id], reason) for e, reason in verdicts if label[e.event_id] != "human")

    assert set(reasons) == {
        ("headless_farm", "scripted_agent"),
        ("headless_farm", "impossible_agent"),
        ("datacenter", "datacenter_ip"),
        ("velocity", "address_velocity"),
        ("replay_loop", "replay_rate"),
        ("threshold_gamer", "threshold_bunching"),
        ("agent_rotation", "agent_rotation"),
    }


def test_headless_farms_send_a_headless_or_an_impossible_agent(mixed):
    sessions: dict[str, set[str]] = {}
    for item in mixed:
        if item.label == traffic.HEADLESS_FARM:
            farm = item.event["session_id"].rsplit("-", 1)[0]
            sessions.setdefault(farm, set()).add(item.event["user_agent"])
    agents = [agent for seen in sessions.values() for agent in seen]
    impossible = [agent for agent in agents if bots.SHIPPED.is_impossible_agent(agent)]

    assert all(len(seen) == 1 for seen in sessions.values())
    assert all(bots.SHIPPED.is_scripted_agent(a) != bots.SHIPPED.is_impossible_agent(a) for a in agents)
    assert 0.2 * len(sessions) <= len(impossible) <= 0.5 * len(sessions)


def test_rotation_agents_are_distinct_real_browsers():
    agents = [agent for agent, _ in traffic.ROTATION_AGENTS]

    assert len(set(agents)) == len(agents) > 3 * bots.SHIPPED.max_agents_per_address_hour
    assert not any(bots.SHIPPED.is_scripted_agent(a) or bots.SHIPPED.is_impossible_agent(a) for a in agents)
    assert not any(bots.SHIPPED.is_missing_agent(a) for a in agents)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32), before_hour_ms=st.integers(0, 540_000))
def test_agent_rotation_is_caught_by_rotation_alone_and_spares_the_humans(seed, before_hour_ms):
    # Slow enough that rotation sessions (minutes each) fit in the run many times over; the run
    # starts up to 9 minutes before a clock hour, so some sessions arrive as an hour ends. It is
    # bounded by time (the count of a small run's events drifts), so no session is cut at its end.
    config = TrafficConfig(
        seed=seed,
        videos=30,
        viewers=200,
        events=None,
        duration_secs=600,
        rate=5.0,
        start_ms=traffic.DEFAULT_START_MS - before_hour_ms,
        bot_fraction=0.2,
        bot_kinds=(traffic.AGENT_ROTATION,),
    )
    items = list(traffic.generate(config))
    label = {item.event["event_id"]: item.label for item in items}
    kept = oracle.dedup(_stamped(config, items))

    verdicts = oracle.view_verdicts(kept)

    limits = bots.SHIPPED
    rotated = [e for e, _ in verdicts if label[e.event_id] == traffic.AGENT_ROTATION]
    reasons = [reason for e, reason in verdicts if label[e.event_id] == traffic.AGENT_ROTATION]
    humans = [reason for e, reason in verdicts if label[e.event_id] == traffic.HUMAN]
    sessions: dict[str, list[Event]] = {}
    for e in rotated:
        sessions.setdefault(e.session_id.rsplit("-", 1)[0], []).append(e)
    velocity, _ = oracle.address_windows([e for e, _ in verdicts])
    assert len(sessions) > 5
    assert sum(r == bots.AGENT_ROTATION for r in reasons) >= 0.98 * len(reasons)
    assert all(velocity[e.event_id] <= limits.max_views_per_address_minute for e in rotated)
    for views in sessions.values():
        assert len({e.ip for e in views}) == len({rules.hour_of(e.ts) for e in views}) == 1
        assert len({e.user_agent for e in views}) == len(views) > limits.max_agents_per_address_hour
        assert len({rules.viewer_of(e) for e in views}) == len(views)
    assert len(humans) > 100
    assert [r for r in humans if r is not None] == []


@pytest.mark.parametrize("name", ["mixed", "crowded"])
def test_no_human_view_is_refused_for_velocity_in_any_60_seconds(name, request):
    config = {"mixed": MIXED, "crowded": CROWDED}[name]
    items = request.getfixturevalue("mixed") if name == "mixed" else list(traffic.generate(config))
    label = {item.event["event_id"]: item.label for item in items}
    kept = oracle.dedup(_stamped(config, items))
    views = [e for e in kept if e.type == "view"]
    human = [e for e in views if label[e.event_id] == traffic.HUMAN]

    velocity, agents = oracle.address_windows(views)
    verdicts = oracle.view_verdicts(kept)

    busiest = max(velocity[e.event_id] for e in human)
    print(f"{name}: the busiest 60 s of a human address holds {busiest} views")
    assert busiest <= bots.SHIPPED.max_views_per_address_minute
    assert max(agents[(e.ip, rules.hour_of(e.ts))] for e in human) <= bots.SHIPPED.max_agents_per_address_hour
    reasons = {reason for e, reason in verdicts if label[e.event_id] == traffic.HUMAN}
    assert bots.ADDRESS_VELOCITY not in reasons
    assert bots.AGENT_ROTATION not in reasons


@EXAMPLES
@given(seed=st.integers(0, 2**32))
def test_threshold_gamers_are_rejected_and_humans_only_near_the_threshold_of_gamed_days(seed):
    config = TrafficConfig(
        seed=seed,
        videos=30,
        viewers=200,
        events=3_000,
        rate=20.0,
        bot_fraction=0.2,
        bot_kinds=(traffic.THRESHOLD_GAMER,),
    )
    items = list(traffic.generate(config))
    label = {item.event["event_id"]: item.label for item in items}

    verdicts = oracle.view_verdicts(oracle.dedup(_stamped(config, items)))

    gamed = [reason for e, reason in verdicts if label[e.event_id] != traffic.HUMAN]
    assert sum(r == bots.THRESHOLD_BUNCHING for r in gamed) >= 0.98 * len(gamed)
    humans = [(e, reason) for e, reason in verdicts if label[e.event_id] == traffic.HUMAN]
    refused = [e for e, reason in humans if reason is not None]
    assert all(bots.SHIPPED.is_near_threshold(e.watch_secs, e.video_duration_secs) for e in refused)
    assert len(refused) <= 0.005 * len(humans)


def test_bots_watch_long_enough_to_be_counted_otherwise(mixed):
    watches = [item.event["watch_secs"] for item in mixed if item.label != traffic.HUMAN]

    assert min(watches) >= 30.0


def test_the_bot_share_is_near_the_setting(mixed):
    truth = traffic.ground_truth(mixed)
    bot_events = truth["events"] - truth["labels"]["human"]["events"]

    assert 0.06 <= bot_events / truth["events"] <= 0.14


def test_the_send_rate_is_near_the_setting():
    config = TrafficConfig(seed=5, events=None, duration_secs=600, rate=50.0)
    items = list(traffic.generate(config))

    assert 0.85 * 50 * 600 <= len(items) <= 1.15 * 50 * 600
    assert items[-1].send_at_ms < 600_000


def test_a_bot_kind_can_be_chosen_alone():
    config = TrafficConfig(seed=3, events=3_000, rate=50.0, bot_fraction=0.3, bot_kinds=("datacenter",))

    assert {item.label for item in traffic.generate(config)} == {"human", "datacenter"}


def test_the_catalog_rows():
    rows = traffic.catalog_rows(CLEAN)

    assert len(rows) == CLEAN.videos
    assert rows[0].video_id == "v0001"
    assert len({r.video_id for r in rows}) == CLEAN.videos
    assert all(re.match(VIDEO_ID_PATTERN, r.video_id) for r in rows)
    assert all(r.duration_secs > 0 for r in rows)
    assert {r.monetized for r in rows} == {True, False}
    assert 1 < len({r.creator_id for r in rows}) < CLEAN.videos
    assert rows == traffic.catalog_rows(CLEAN)


def test_popularity_follows_the_catalog_ranking(clean):
    views = Counter(item.event["video_id"] for item in clean if item.event["type"] == "view")
    top = [video for video, _ in views.most_common(3)]

    assert "v0001" in top
    assert views["v0001"] > 5 * views["v0100"]


def test_traffic_is_written_as_jsonl_with_its_ground_truth(tmp_path: Path):
    config = TrafficConfig(seed=2, events=2_000, rate=100.0, bot_fraction=0.2)
    items = list(traffic.generate(config))
    path = tmp_path / "traffic.jsonl"

    truth = traffic.write_traffic(items, path, config)

    lines = path.read_bytes().splitlines()
    assert [json.loads(line) for line in lines] == [item.event for item in items]
    on_disk = json.loads(traffic.truth_path(path).read_text())
    assert on_disk == json.loads(json.dumps(truth))
    assert on_disk["events"] == len(items)
    assert on_disk["config"]["seed"] == 2
    assert sum(len(ids) for ids in on_disk["bot_event_ids"].values()) == sum(
        1 for item in items if item.label != "human" and not item.retry
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"events": None, "duration_secs": None},
        {"bot_fraction": 1.0},
        {"retry_rate": -0.1},
        {"bot_kinds": ("lizard",)},
        {"heartbeat_secs": 60.0},
        {"videos": 0},
    ],
)
def test_a_config_that_cannot_run_is_refused(fields):
    with pytest.raises(InvalidSetting):
        TrafficConfig(**fields)
