"""Each bot signal at and around its threshold, and the score that rejects (thresholds from the
rules shipped with Tally)."""

from __future__ import annotations

import ipaddress

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from counting import bots, rules
from counting.botrules import shipped_rules
from counting.bots import BotFilter
from counting.event import Event
from counting.traffic import BROWSERS, HEADLESS_AGENTS
from tests.rulesfiles import IMPOSSIBLE_AGENT

EXAMPLES = settings(max_examples=80, deadline=None)
NETWORKS = [ipaddress.ip_network(r) for r in bots.SHIPPED.rules.addresses.datacenter]
SIGNAL = bots.SHIPPED.signals  # the shipped rules' signals, by name


def test_address_velocity_at_and_above_the_limit():
    assert bots.SHIPPED.is_high_velocity(bots.SHIPPED.max_views_per_address_minute) is False
    assert bots.SHIPPED.is_high_velocity(bots.SHIPPED.max_views_per_address_minute + 1) is True


def test_replay_rate_at_and_above_the_limit():
    assert bots.SHIPPED.is_replay_loop(bots.SHIPPED.max_replays_per_day) is False
    assert bots.SHIPPED.is_replay_loop(bots.SHIPPED.max_replays_per_day + 1) is True


@EXAMPLES
@given(duration=st.floats(0.1, bots.SHIPPED.max_watch_secs / 2))
def test_watch_anomaly_at_and_just_above_the_allowance(duration):
    allowance = duration * bots.SHIPPED.watch_overrun_factor + bots.SHIPPED.watch_overrun_slack_secs

    assert bots.SHIPPED.is_watch_anomaly(allowance, duration) is False
    assert bots.SHIPPED.is_watch_anomaly(allowance * 1.000001 + 1e-6, duration) is True
    assert bots.SHIPPED.is_watch_anomaly(duration, duration) is False


def test_watch_anomaly_beyond_any_plausible_watch_even_without_a_duration():
    assert bots.SHIPPED.is_watch_anomaly(bots.SHIPPED.max_watch_secs, None) is False
    assert bots.SHIPPED.is_watch_anomaly(bots.SHIPPED.max_watch_secs + 0.1, None) is True
    assert bots.SHIPPED.is_watch_anomaly(None, 10.0) is False


@pytest.mark.parametrize("agent", HEADLESS_AGENTS)
def test_headless_and_scripted_agents_are_flagged(agent):
    assert bots.SHIPPED.is_scripted_agent(agent) is True


@pytest.mark.parametrize(
    "agent", ["curl/8.4.0", "Wget/1.21", "Scrapy/2.11", "okhttp/4.12.0", "Java/17", "Googlebot bot"]
)
def test_more_scripted_agents_are_flagged(agent):
    assert bots.SHIPPED.is_scripted_agent(agent) is True


@pytest.mark.parametrize("agent", [a for a, _ in BROWSERS] + ["Mozilla/5.0 (Robotics Lab)", None])
def test_browsers_are_not_flagged(agent):
    assert bots.SHIPPED.is_scripted_agent(agent) is False


@pytest.mark.parametrize("network", NETWORKS, ids=str)
def test_datacenter_ranges_at_their_edges(network):
    first, last = network.network_address, network.broadcast_address

    assert bots.SHIPPED.is_datacenter_ip(str(first)) is True
    assert bots.SHIPPED.is_datacenter_ip(str(last)) is True
    assert bots.SHIPPED.is_datacenter_ip(str(first - 1)) is False
    assert bots.SHIPPED.is_datacenter_ip(str(last + 1)) is False


@EXAMPLES
@given(data=st.data())
def test_any_address_inside_a_datacenter_range_is_flagged(data):
    network = data.draw(st.sampled_from(NETWORKS))
    offset = data.draw(st.integers(0, network.num_addresses - 1))

    assert bots.SHIPPED.is_datacenter_ip(str(network.network_address + offset)) is True


@pytest.mark.parametrize("ip", [None, "", "not-an-ip", "192.168.1.10", "2001:db8::1"])
def test_other_or_missing_addresses_are_not_datacenter(ip):
    assert bots.SHIPPED.is_datacenter_ip(ip) is False


@pytest.mark.parametrize("ja3", sorted(bots.SHIPPED.bad_ja3))
def test_bad_tls_fingerprints_are_flagged_in_any_case(ja3):
    assert bots.SHIPPED.is_bad_ja3(ja3) is True
    assert bots.SHIPPED.is_bad_ja3(ja3.upper()) is True


@pytest.mark.parametrize("ja3", [None, "", "cd08e31494f9531f560d64c695473da9"])
def test_other_fingerprints_are_not_flagged(ja3):
    assert bots.SHIPPED.is_bad_ja3(ja3) is False


@EXAMPLES
@given(found=st.lists(st.sampled_from(tuple(bots.SHIPPED.signals.values())), unique=True))
def test_a_view_is_rejected_exactly_when_its_score_reaches_the_threshold(found):
    reason = bots.SHIPPED.rejection_reason(found)

    if sum(s.weight for s in found) >= bots.SHIPPED.reject_score:
        heaviest = max(s.weight for s in found)
        assert reason in {s.name for s in found if s.weight == heaviest}
    else:
        assert reason is None


@pytest.mark.parametrize(
    "strong", [SIGNAL[bots.SCRIPTED_AGENT], SIGNAL[bots.ADDRESS_VELOCITY], SIGNAL[bots.REPLAY_RATE]]
)
def test_each_strong_signal_rejects_alone(strong):
    assert bots.SHIPPED.rejection_reason([strong]) == strong.name


@pytest.mark.parametrize(
    "weak", [SIGNAL[bots.DATACENTER_IP], SIGNAL[bots.BAD_TLS], SIGNAL[bots.WATCH_ANOMALY]]
)
def test_each_weak_signal_alone_does_not_reject(weak):
    assert bots.SHIPPED.rejection_reason([weak]) is None


def test_two_weak_signals_reject_with_the_heavier_as_reason():
    assert bots.SHIPPED.rejection_reason([SIGNAL[bots.WATCH_ANOMALY], SIGNAL[bots.BAD_TLS]]) == bots.BAD_TLS
    assert (
        bots.SHIPPED.rejection_reason([SIGNAL[bots.BAD_TLS], SIGNAL[bots.DATACENTER_IP]])
        == bots.DATACENTER_IP
    )


IMPOSSIBLE = IMPOSSIBLE_AGENT


def test_a_missing_or_blank_agent_is_missing_and_scores_below_the_reject_threshold():
    assert bots.SHIPPED.is_missing_agent(None) is True
    assert bots.SHIPPED.is_missing_agent(" \t") is True
    assert bots.SHIPPED.is_missing_agent(BROWSERS[0][0]) is False
    assert bots.SHIPPED.rejection_by_mask[bots.BIT[bots.MISSING_AGENT]] is None
    with_anomaly = bots.BIT[bots.MISSING_AGENT] | bots.BIT[bots.WATCH_ANOMALY]
    assert bots.SHIPPED.rejection_by_mask[with_anomaly] == bots.WATCH_ANOMALY  # 0.5 + 0.5: the first listed


@pytest.mark.parametrize(
    ("agent", "impossible"),
    [
        (IMPOSSIBLE, True),  # a Chrome that does not exist yet
        (IMPOSSIBLE.replace("Chrome/312", "Chrome/149"), False),  # the newest the rules allow
        (IMPOSSIBLE.replace("Chrome/312", "Chrome/150"), True),  # the first they refuse
        ("Mozilla/5.0 (X11; Linux x86_64; rv:159.0) Gecko/20100101 Firefox/159.0", False),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:160.0) Gecko/20100101 Firefox/160.0", True),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64)", False),
        ("Mozilla/5.0 (Windows NT 11.0; Win64; x64)", True),  # Windows 11 still says 10.0
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X; Windows NT 10.0)", True),
        ("Mozilla/5.0 (Windows NT 10.0; Android 14)", True),
        ("Mozilla/5.\x00", True),  # a control character
        ("Mozilla/5", True),  # 9 characters: too short for any client
        ("Mozilla/50", False),  # 10
        (None, False),  # missing, not impossible
        *((browser, False) for browser, _ in BROWSERS),
    ],
)
def test_impossible_agents_at_and_beside_each_rule(agent, impossible):
    assert bots.SHIPPED.is_impossible_agent(agent) is impossible
    client = bots.SHIPPED.client_mask(agent, "81.2.3.4", None)
    assert bool(client & bots.BIT[bots.IMPOSSIBLE_AGENT]) is impossible
    assert (bots.SHIPPED.rejection_by_mask[client] == bots.IMPOSSIBLE_AGENT) is impossible


def test_agent_rotation_at_and_above_its_limit_and_never_for_an_allowed_address(make_event):
    limit = bots.SHIPPED.max_agents_per_address_hour
    view = _view(make_event, ip="81.2.3.4")
    assert bots.SHIPPED.signals_for(view, 1, 1, False, limit) == []
    assert bots.SHIPPED.signals_for(view, 1, 1, False, limit + 1) == [SIGNAL[bots.AGENT_ROTATION]]
    allowed = BotFilter(
        shipped_rules().model_copy(
            update={"addresses": shipped_rules().addresses.model_copy(update={"allow": ["81.2.3.0/24"]})}
        )
    )
    assert allowed.signals_for(view, 1, 1, False, limit + 1) == []


def test_the_reasons_are_the_signal_names():
    assert tuple(s.name for s in tuple(bots.SHIPPED.signals.values())) == bots.REASONS
    assert len(set(bots.REASONS)) == len(bots.REASONS)


def _view(make_event, **fields) -> Event:
    """A view from a browser (its agent is a real browser's unless `fields` say otherwise)."""
    return msgspec.convert(make_event("view", **{"user_agent": BROWSERS[0][0], **fields}), type=Event)


def test_window_signals_at_and_above_their_limits(make_event):
    view = _view(make_event)
    calm = bots.SHIPPED.signals_for(
        view, bots.SHIPPED.max_views_per_address_minute, bots.SHIPPED.max_replays_per_day
    )
    busy = bots.SHIPPED.signals_for(
        view, bots.SHIPPED.max_views_per_address_minute + 1, bots.SHIPPED.max_replays_per_day + 1
    )

    assert calm == []
    assert busy == [SIGNAL[bots.ADDRESS_VELOCITY], SIGNAL[bots.REPLAY_RATE]]


def test_static_signals_of_one_event(make_event):
    view = _view(
        make_event,
        user_agent=HEADLESS_AGENTS[0],
        ip="52.0.0.1",
        ja3=sorted(bots.SHIPPED.bad_ja3)[0],
        watch_secs=100.0,
        video_duration_secs=10.0,
    )

    assert bots.SHIPPED.static_signals(view) == [
        SIGNAL[bots.SCRIPTED_AGENT],
        SIGNAL[bots.DATACENTER_IP],
        SIGNAL[bots.BAD_TLS],
        SIGNAL[bots.WATCH_ANOMALY],
    ]
    assert bots.SHIPPED.static_signals(_view(make_event)) == []


def test_ipv4_mapped_ipv6_addresses_are_checked_as_ipv4():
    assert bots.SHIPPED.is_datacenter_ip("::ffff:52.0.0.1") is True
    assert bots.SHIPPED.is_datacenter_ip("::ffff:24.0.0.1") is False


@pytest.mark.parametrize(
    "ip",
    [
        "52.0.0.1",
        "52.63.255.255",
        "52.64.0.0",
        "::ffff:3.1.2.3",
        "2a05:d000::5",
        "1.2.3",
        "x",
        "fe80::1%eth0",
    ],
)
def test_datacenter_check_equals_plain_membership_in_the_ranges(ip):
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        expected = False
    else:
        mapped = getattr(address, "ipv4_mapped", None) or address
        expected = any(
            mapped in ipaddress.ip_network(r)
            for r in bots.SHIPPED.rules.addresses.datacenter
            if ipaddress.ip_network(r).version == mapped.version
        )
    assert bots.SHIPPED.is_datacenter_ip(ip) == expected


def _membership(ip: str) -> bool:
    """The datacenter check written plainly with `ipaddress` (the reference)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None) or address
    return any(
        n.version == mapped.version and mapped in n
        for n in map(ipaddress.ip_network, bots.SHIPPED.rules.addresses.datacenter)
    )


_EDGES = [
    int(edge)
    for r in bots.SHIPPED.rules.addresses.datacenter
    if ipaddress.ip_network(r).version == 4
    for edge in (ipaddress.ip_network(r).network_address, ipaddress.ip_network(r).broadcast_address)
]


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.integers(0, 2**32 - 1),
        st.sampled_from(_EDGES).flatmap(lambda e: st.integers(max(0, e - 2), min(2**32 - 1, e + 2))),
    ),
    st.booleans(),
)
def test_fast_datacenter_check_equals_ipaddress_on_any_address(value, mapped):
    ip = str(ipaddress.IPv4Address(value))
    if mapped:
        ip = f"::ffff:{ip}"
    assert bots.SHIPPED.is_datacenter_ip(ip) == _membership(ip)


def test_the_rejection_table_is_the_rejection_reason_of_every_combination():
    for mask in range(1 << len(bots.MASK_ORDER)):
        found = [SIGNAL[name] for name in bots.MASK_ORDER if mask & bots.BIT[name]]
        assert bots.SHIPPED.rejection_by_mask[mask] == bots.SHIPPED.rejection_reason(found)
    assert bots.SHIPPED.rejection_by_mask[0] is None


@EXAMPLES
@given(
    agent=st.sampled_from([None, "  ", "curl/8.4.0", HEADLESS_AGENTS[0], BROWSERS[0][0], IMPOSSIBLE]),
    ip=st.sampled_from([None, "52.0.0.1", "81.2.3.4", "::ffff:52.1.2.3", "2600:1f00::1"]),
    ja3=st.sampled_from([None, sorted(bots.SHIPPED.bad_ja3)[0], "abc"]),
    watch=st.sampled_from([None, 10.0, 100.0, bots.SHIPPED.max_watch_secs + 1]),
    duration=st.sampled_from([None, 20.0, 900.0]),
    address_views=st.integers(0, bots.SHIPPED.max_views_per_address_minute + 2),
    viewer_views=st.integers(0, bots.SHIPPED.max_replays_per_day + 2),
    bunched=st.booleans(),
    address_agents=st.integers(0, bots.SHIPPED.max_agents_per_address_hour + 2),
)
def test_a_view_mask_holds_exactly_the_signals_of_the_view(
    agent, ip, ja3, watch, duration, address_views, viewer_views, bunched, address_agents
):
    expected = []
    if bots.SHIPPED.is_scripted_agent(agent):
        expected.append(SIGNAL[bots.SCRIPTED_AGENT])
    if bots.SHIPPED.is_datacenter_ip(ip):
        expected.append(SIGNAL[bots.DATACENTER_IP])
    if bots.SHIPPED.is_bad_ja3(ja3):
        expected.append(SIGNAL[bots.BAD_TLS])
    if bots.SHIPPED.is_watch_anomaly(watch, duration):
        expected.append(SIGNAL[bots.WATCH_ANOMALY])
    if bots.SHIPPED.is_high_velocity(address_views):
        expected.append(SIGNAL[bots.ADDRESS_VELOCITY])
    if bots.SHIPPED.is_replay_loop(viewer_views):
        expected.append(SIGNAL[bots.REPLAY_RATE])
    if bots.SHIPPED.is_low_watch_ratio(watch, duration):
        expected.append(SIGNAL[bots.WATCH_RATIO])
    if bunched:
        expected.append(SIGNAL[bots.THRESHOLD_BUNCHING])
    if bots.SHIPPED.is_missing_agent(agent):
        expected.append(SIGNAL[bots.MISSING_AGENT])
    if bots.SHIPPED.is_impossible_agent(agent):
        expected.append(SIGNAL[bots.IMPOSSIBLE_AGENT])
    if bots.SHIPPED.is_agent_rotation(address_agents):
        expected.append(SIGNAL[bots.AGENT_ROTATION])

    mask = bots.SHIPPED.view_mask(
        bots.SHIPPED.client_mask(agent, ip, ja3),
        watch,
        duration,
        address_views,
        viewer_views,
        bunched,
        address_agents,
    )

    assert bots.SHIPPED.signals_of(mask) == expected


def test_watch_ratio_at_and_below_the_minimum_share():
    share = bots.SHIPPED.min_watch_ratio
    assert bots.SHIPPED.is_low_watch_ratio(1_000.0 * share, 1_000.0) is False
    assert bots.SHIPPED.is_low_watch_ratio(1_000.0 * share - 0.1, 1_000.0) is True
    assert bots.SHIPPED.is_low_watch_ratio(1.0, None) is False  # the length is unknown
    assert bots.SHIPPED.is_low_watch_ratio(None, 1_000.0) is False


def test_near_the_threshold_is_within_the_window_past_it_and_before_the_end():
    window = bots.SHIPPED.bunch_window_secs
    at, below = rules.MIN_WATCH_SECS, rules.MIN_WATCH_SECS + window
    near = bots.SHIPPED.is_near_threshold
    assert near(at, 600.0) and near(below - 0.01, 600.0) and near(at, None)
    assert not near(at - 0.01, 600.0) and not near(below, 600.0)
    # A video barely longer than the threshold is watched to its end there: not near.
    assert near(at, at + window + 0.01) and not near(at, at + window)
    assert not near(None, 600.0)


def test_a_video_day_is_bunched_at_the_minimum_views_and_share():
    least, share = bots.SHIPPED.bunch_min_views, bots.SHIPPED.bunch_min_share
    assert bots.SHIPPED.is_bunched(least, least) is True
    assert bots.SHIPPED.is_bunched(least - 1, least - 1) is False
    qualified = round(least / share)  # the near views are exactly the minimum share
    assert bots.SHIPPED.is_bunched(least, qualified) is True
    assert bots.SHIPPED.is_bunched(least, qualified + 1) is False
