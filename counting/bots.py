"""Bot scoring: six weighted signals with their thresholds as data, and the score that rejects."""

from __future__ import annotations

import ipaddress
import re
import socket
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

from counting.event import Event

REJECT_SCORE = 1.0

# Scripted or headless clients announce themselves in the user agent.
SCRIPTED_AGENT_PATTERN = (
    r"(?i)(headless|phantomjs|selenium|webdriver|puppeteer|playwright|python-requests|python-urllib"
    r"|aiohttp|curl/|wget/|scrapy|httpclient|go-http-client|okhttp|java/|\bbot\b|spider|crawler)"
)
_SCRIPTED_AGENT_RE = re.compile(SCRIPTED_AGENT_PATTERN)

# Published ranges of large cloud providers (a sample; extend as data, bump RULES_VERSION).
DATACENTER_RANGES: tuple[str, ...] = (
    "3.0.0.0/9",
    "13.64.0.0/11",
    "18.128.0.0/9",
    "34.64.0.0/10",
    "35.184.0.0/13",
    "52.0.0.0/10",
    "104.196.0.0/14",
    "159.89.0.0/16",
    "2600:1f00::/24",
    "2a05:d000::/25",
)
_NETWORKS = tuple(ipaddress.ip_network(r) for r in DATACENTER_RANGES)


def _ranges(version: int) -> tuple[list[int], list[int]]:
    """The ranges of one IP version as sorted, disjoint (first, last) integers: starts and ends."""
    starts: list[int] = []
    ends: list[int] = []
    for n in sorted(_NETWORKS, key=lambda n: int(n.network_address)):
        first, last = int(n.network_address), int(n.broadcast_address)
        if n.version != version:
            continue
        if ends and first <= ends[-1] + 1:
            ends[-1] = max(ends[-1], last)
        else:
            starts.append(first)
            ends.append(last)
    return starts, ends


_V4_STARTS, _V4_ENDS = _ranges(4)
_V6_STARTS, _V6_ENDS = _ranges(6)
_V4_MAPPED_PREFIX = int(ipaddress.IPv6Address("::ffff:0:0"))

# TLS client fingerprints of scripting libraries and known farms.
BAD_JA3: frozenset[str] = frozenset(
    {
        "3b5074b1b5d032e5620f69f9f700ff0e",
        "b32309a26951912be7dba376398abc3b",
        "6734f37431670b3ab4292b8f60f29984",
        "e7d705a3286e19ea42f587b344ee6865",
    }
)

MAX_VIEWS_PER_ADDRESS_MINUTE = 30
MAX_REPLAYS_PER_DAY = 12
WATCH_OVERRUN_FACTOR = 1.05
WATCH_OVERRUN_SLACK_SECS = 5.0
MAX_WATCH_SECS = 12 * 3600.0


@dataclass(frozen=True)
class Signal:
    """One bot signal: its name (the rejection reason) and its weight in the score."""

    name: str
    weight: float


SCRIPTED_AGENT = Signal("scripted_agent", 1.0)
DATACENTER_IP = Signal("datacenter_ip", 0.6)
ADDRESS_VELOCITY = Signal("address_velocity", 1.0)
WATCH_ANOMALY = Signal("watch_anomaly", 0.5)
REPLAY_RATE = Signal("replay_rate", 1.0)
BAD_TLS = Signal("bad_ja3", 0.6)

SIGNALS: tuple[Signal, ...] = (
    SCRIPTED_AGENT,
    ADDRESS_VELOCITY,
    REPLAY_RATE,
    DATACENTER_IP,
    BAD_TLS,
    WATCH_ANOMALY,
)
REASONS: tuple[str, ...] = tuple(s.name for s in SIGNALS)


@lru_cache(maxsize=65_536)
def is_scripted_agent(user_agent: str | None) -> bool:
    return user_agent is not None and _SCRIPTED_AGENT_RE.search(user_agent) is not None


@lru_cache(maxsize=262_144)
def is_datacenter_ip(ip: str | None) -> bool:
    """In a data-centre range (an IPv4-mapped IPv6 address counts as its IPv4); remembered per
    address, since the counter's hot path asks for the same addresses again and again.

    Plain addresses are parsed by `socket.inet_pton` (it accepts a strict subset of what
    `ipaddress` does, about 20 times faster); the rest (e.g. scoped IPv6) go through `ipaddress`."""
    if ip is None:
        return False
    try:
        return _in_ranges(int.from_bytes(socket.inet_pton(socket.AF_INET, ip)), _V4_STARTS, _V4_ENDS)
    except OSError:
        pass
    try:
        value = int.from_bytes(socket.inet_pton(socket.AF_INET6, ip))
    except OSError:
        return _is_datacenter_address(ip)
    if value >> 32 == _V4_MAPPED_PREFIX >> 32:
        return _in_ranges(value & 0xFFFFFFFF, _V4_STARTS, _V4_ENDS)
    return _in_ranges(value, _V6_STARTS, _V6_ENDS)


def _in_ranges(value: int, starts: list[int], ends: list[int]) -> bool:
    at = bisect_right(starts, value) - 1
    return at >= 0 and value <= ends[at]


def _is_datacenter_address(ip: str) -> bool:
    """`is_datacenter_ip` through the `ipaddress` module (forms `inet_pton` refuses)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == n.version and address in n for n in _NETWORKS)


def is_bad_ja3(ja3: str | None) -> bool:
    return ja3 is not None and ja3.lower() in BAD_JA3


def is_watch_anomaly(watch_secs: float | None, duration_secs: float | None) -> bool:
    """Watched longer than the video allows, or longer than anyone plausibly watches."""
    if watch_secs is None:
        return False
    if watch_secs > MAX_WATCH_SECS:
        return True
    if duration_secs is None:
        return False
    return watch_secs > duration_secs * WATCH_OVERRUN_FACTOR + WATCH_OVERRUN_SLACK_SECS


def is_high_velocity(views_from_address_this_minute: int) -> bool:
    return views_from_address_this_minute > MAX_VIEWS_PER_ADDRESS_MINUTE


def is_replay_loop(views_by_viewer_of_video_today: int) -> bool:
    return views_by_viewer_of_video_today > MAX_REPLAYS_PER_DAY


# Bit i of a signal mask is signal i of MASK_ORDER: the order `signals` lists them, which is the
# order `score` adds their weights in. The first three are properties of the client alone.
MASK_ORDER: tuple[Signal, ...] = (
    SCRIPTED_AGENT,
    DATACENTER_IP,
    BAD_TLS,
    WATCH_ANOMALY,
    ADDRESS_VELOCITY,
    REPLAY_RATE,
)
BIT: dict[str, int] = {signal.name: 1 << i for i, signal in enumerate(MASK_ORDER)}
_SCRIPTED_BIT = BIT[SCRIPTED_AGENT.name]
_DATACENTER_BIT = BIT[DATACENTER_IP.name]
_BAD_TLS_BIT = BIT[BAD_TLS.name]
_WATCH_BIT = BIT[WATCH_ANOMALY.name]
_VELOCITY_BIT = BIT[ADDRESS_VELOCITY.name]
_REPLAY_BIT = BIT[REPLAY_RATE.name]


@lru_cache(maxsize=262_144)
def client_mask(user_agent: str | None, ip: str | None, ja3: str | None) -> int:
    """The mask of the signals a client shows by itself: its agent, address and TLS fingerprint
    (remembered per client: the counter's hot path sees the same clients again and again)."""
    mask = 0
    if is_scripted_agent(user_agent):
        mask |= _SCRIPTED_BIT
    if is_datacenter_ip(ip):
        mask |= _DATACENTER_BIT
    if is_bad_ja3(ja3):
        mask |= _BAD_TLS_BIT
    return mask


def view_mask(
    client: int,
    watch_secs: float | None,
    duration_secs: float | None,
    address_minute_views: int,
    viewer_day_views: int,
) -> int:
    """The mask of every signal of a view, from its client's mask (`client_mask`), its watch time
    and its window counts (views from its address in its minute, views of its video by its viewer
    in its day)."""
    mask = client
    if is_watch_anomaly(watch_secs, duration_secs):
        mask |= _WATCH_BIT
    if is_high_velocity(address_minute_views):
        mask |= _VELOCITY_BIT
    if is_replay_loop(viewer_day_views):
        mask |= _REPLAY_BIT
    return mask


def signals_of(mask: int) -> list[Signal]:
    """The signals of a mask, in MASK_ORDER."""
    return [signal for bit, signal in enumerate(MASK_ORDER) if mask >> bit & 1]


def static_signals(event: Event) -> list[Signal]:
    """The signals one event shows on its own, without any window."""
    return signals(event, 0, 0)


def signals(event: Event, address_minute_views: int, viewer_day_views: int) -> list[Signal]:
    """Every signal of a view, given its window counts (views from its address in its minute,
    views of its video by its viewer in its day)."""
    client = client_mask(event.user_agent, event.ip, event.ja3)
    return signals_of(
        view_mask(client, event.watch_secs, event.video_duration_secs, address_minute_views, viewer_day_views)
    )


def score(found: list[Signal]) -> float:
    return sum(s.weight for s in found)


def rejection_reason(found: list[Signal]) -> str | None:
    """The reason recorded for a rejected view (its heaviest signal), or None if it is not rejected."""
    if score(found) < REJECT_SCORE:
        return None
    return min(found, key=lambda s: (-s.weight, SIGNALS.index(s))).name


# The rejection reason of every mask (None: not rejected), so a hot path decides a view with one
# lookup; it is `rejection_reason` itself, evaluated once per combination of signals.
REJECTION_BY_MASK: tuple[str | None, ...] = tuple(
    rejection_reason(signals_of(mask)) for mask in range(1 << len(MASK_ORDER))
)
