"""A view's verdict in the speed layer (`judge.judge_view`) against the rules of `counting/`: the
reason a rejection names, the window signals (address velocity, agent rotation, threshold bunching)
as views come, and hot videos' shard counts."""

from __future__ import annotations

import random

from counting import bots, rules
from counting.event import Event
from speed_layer.counter.hot import HotVideos
from speed_layer.counter.judge import FLAGGED, QUALIFIED, judge_view
from speed_layer.counter.windows import ViewWindows
from tests.rulesfiles import BROWSER, IMPOSSIBLE_AGENT, threshold_gamed_views
from tests.speed_layer.helpers import Traffic

NOW = 1_795_000_000_000


def _verdicts(events: list[Event]) -> list[str]:
    """Each view's verdict, judged in order by one worker's windows, as the counter judges them."""
    windows = ViewWindows()
    return [judge_view(e, rules.viewer_of(e), True, windows, bots.SHIPPED) for e in events]


def test_the_bot_rejection_reason_comes_from_the_rules() -> None:
    t = Traffic(now_ms=NOW)
    # Two weak signals: the rules' tie-break (the heavier one) names the reason.
    view = t.view("v", "u", ip="52.0.0.1", watch=5_000.0, ja3=sorted(bots.SHIPPED.bad_ja3)[0])
    reason = bots.SHIPPED.rejection_reason(bots.SHIPPED.signals_for(view, 1, 1))
    assert reason is not None
    assert _verdicts([view]) == [f"rejected:{reason}"]


def test_verdicts_equal_the_rules_on_random_views() -> None:
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
        if reason is not None:
            expected.append(f"rejected:{reason}")
        else:
            expected.append(FLAGGED if bots.SHIPPED.is_flagged(found) else QUALIFIED)
    assert _verdicts(events) == expected
    assert {QUALIFIED, FLAGGED} <= set(expected)
    assert len(set(expected)) > 4
    assert f"rejected:{bots.THRESHOLD_BUNCHING}" in expected
    assert f"rejected:{bots.AGENT_ROTATION}" in expected
    assert f"rejected:{bots.IMPOSSIBLE_AGENT}" in expected


def test_address_velocity_rejects_views_past_the_threshold() -> None:
    t = Traffic(now_ms=NOW)
    burst = [t.view("v", f"u{i}", ip="81.1.1.1", ts=NOW - 5_000) for i in range(35)]
    verdicts = _verdicts(burst)
    assert verdicts[:30] == [QUALIFIED] * 30
    assert set(verdicts[30:]) == {f"rejected:{bots.ADDRESS_VELOCITY}"}


def test_a_copy_judged_before_is_not_counted_again_by_the_windows() -> None:
    t = Traffic(now_ms=NOW)
    view = t.view("v", "u", ip="81.1.1.1")
    windows = ViewWindows()
    viewer = rules.viewer_of(view)
    judge_view(view, viewer, True, windows, bots.SHIPPED)
    judge_view(t.retry(view), viewer, False, windows, bots.SHIPPED)
    assert windows.observe(view, count=False) == (1, 1, 1)


def test_views_gamed_past_the_threshold_are_rejected_once_the_window_shows_bunching() -> None:
    events = [e for e in threshold_gamed_views(NOW - rules.DAY_MS) if e.video_id == "vid-gamed"]
    verdicts = dict(zip((e.event_id for e in events), _verdicts(events), strict=True))
    gamed = [verdicts[e.event_id] for e in events if (e.watch_secs or 0) < 31.0]
    humans = [verdicts[e.event_id] for e in events if (e.watch_secs or 0) >= 31.0]
    least = bots.SHIPPED.bunch_min_views  # 40 humans came first: the share is met from then on
    reject = f"rejected:{bots.THRESHOLD_BUNCHING}"
    assert gamed == [QUALIFIED] * (least - 1) + [reject] * (len(gamed) - least + 1)
    assert humans == [QUALIFIED] * 40


def test_shard_counts_double_at_most_once_a_second_up_to_the_cap() -> None:
    hot = HotVideos(threshold=100, max_shards=4)
    steps = [(0, 0, 500), (1_000, 1_000, 500), (2_000, 1_500, 500), (3_000, 2_500, 500), (4_000, 3_500, 500)]
    asked = [hot.observe({"v": n}, ingest_ms, now_ms).get("v") for ingest_ms, now_ms, n in steps]
    assert asked == [None, 2, 2, 4, 4]
    assert hot.observe({"v": 10}, 5_000, 4_500) == {}  # cooled down: no renewal
