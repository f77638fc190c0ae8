"""`bench.speed_traffic`: the fixed mix of the speed-layer benchmarks, drawn from `counting.traffic`'s
senders and catalog, packed as the ingest API packs it."""

from __future__ import annotations

from collections import Counter

from bench import speed_traffic
from counting import bots
from counting.catalog import make_catalog
from counting.traffic import BROWSERS, HEADLESS_AGENTS
from counting.traffic_clients import HOME_V4
from counting.wire import decode_events

START = 1_780_272_000_000


def test_the_mix_has_the_set_shares_of_each_kind() -> None:
    events = speed_traffic.generate(20_000, 50, 4_000, 3, START, 50_000.0)
    assert len(events) == 20_000
    kinds = Counter(e.type for e in events)
    views = [e for e in events if e.type == "view"]
    short = sum(1 for e in views if (e.watch_secs or 0) < 30)
    scripted = sum(1 for e in views if e.user_agent in HEADLESS_AGENTS)
    ids = Counter(e.event_id for e in events)
    retries = sum(n - 1 for n in ids.values())
    mix = speed_traffic.Mix()
    assert abs(kinds["heartbeat"] / len(events) - mix.heartbeats) < 0.02
    reactions = kinds["like"] + kinds["unlike"] + kinds["dislike"]
    assert abs(reactions / len(events) - mix.reactions) < 0.02
    assert abs(short / len(events) - mix.short_views) < 0.02
    assert abs(scripted / len(events) - mix.scripted_views) < 0.01
    assert abs(retries / len(events) - mix.retries) < 0.01


def test_events_come_from_home_addresses_browsers_and_the_catalog() -> None:
    events = speed_traffic.generate(5_000, 50, 1_000, 3, START, 50_000.0)
    views = [e for e in events if e.type == "view"]
    assert {int((e.ip or "").split(".")[0]) for e in views} <= set(HOME_V4)
    agents = {e.user_agent for e in views}
    assert agents <= {a for a, _ in BROWSERS} | set(HEADLESS_AGENTS)
    assert agents & set(HEADLESS_AGENTS)
    catalog = make_catalog(3, 50, zipf_exponent=speed_traffic.ZIPF_EXPONENT)
    assert {e.video_id for e in events} <= {row.video_id for row in catalog.rows}
    top = Counter(e.video_id for e in events).most_common(1)[0][0]
    assert top == catalog.rows[0].video_id
    filter_ = bots.SHIPPED
    assert all(
        filter_.client_mask(e.user_agent, e.ip, e.ja3) for e in views if e.user_agent in HEADLESS_AGENTS
    )
    assert not any(
        filter_.client_mask(e.user_agent, e.ip, e.ja3) for e in views if e.user_agent not in HEADLESS_AGENTS
    )


def test_requests_share_an_ingest_time_and_records_hold_every_event_once() -> None:
    events = speed_traffic.generate(2_000, 20, 500, 1, START, 10_000.0)
    stamps = Counter(e.ingest_ts for e in events)
    assert sorted(stamps.values()) == [speed_traffic.REQUEST_EVENTS] * 4
    records = speed_traffic.pack(events, 4, {})
    decoded = [event for _, _, value in records for event in decode_events(value)]
    assert sorted(decoded, key=lambda e: (e.ingest_ts or 0, e.event_id)) == sorted(
        events, key=lambda e: (e.ingest_ts or 0, e.event_id)
    )
    assert {partition for partition, _, _ in records} <= set(range(4))
