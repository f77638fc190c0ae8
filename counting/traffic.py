"""Seeded, realistic traffic over a video catalog: human sessions and labelled bots, with send times.

Time is real: an event's `ts` is when it happened and `send_at_ms` (from `start_ms`) when the client
sends it, so `parse_event(event, start_ms + send_at_ms)` accepts every generated event. Sessions
arrive as a Poisson process sized to `rate`; with `warm_start` the platform is already busy at 0.
"""

from __future__ import annotations

import heapq
import ipaddress
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from counting import bots, rules
from counting.catalog import Catalog, CatalogRow, make_catalog
from counting.errors import InvalidSetting

HUMAN = "human"
HEADLESS_FARM = "headless_farm"
DATACENTER = "datacenter"
VELOCITY = "velocity"
REPLAY_LOOP = "replay_loop"
THRESHOLD_GAMER = "threshold_gamer"
AGENT_ROTATION = "agent_rotation"
BOT_KINDS: tuple[str, ...] = (
    HEADLESS_FARM,
    DATACENTER,
    VELOCITY,
    REPLAY_LOOP,
    THRESHOLD_GAMER,
    AGENT_ROTATION,
)
LABELS: tuple[str, ...] = (HUMAN, *BOT_KINDS)

DEFAULT_START_MS = 1_780_272_000_000  # 2026-06-01T00:00:00Z
LATE_MS = 60_000  # sent more than a minute after it happened: a late event
WARMUP_MS = 15 * 60_000

# Human behaviour (probabilities per watch unless said otherwise).
_BOUNCE = 0.22  # leaves before MIN_WATCH_SECS
_REFRESH = 0.06  # reloads the page: a second view right after
_REWATCH = 0.15  # a session picks a video the viewer watched before
_ATTENTION_SECS = 600.0  # mean attention span: long videos are seldom watched to the end
_LEAVE = 0.4  # ends the session after a video (mean 2.5 videos a session)
_LIKE, _DISLIKE, _STRAY_UNLIKE = 0.08, 0.015, 0.01  # logged-in viewers only
_DOUBLE_LIKE, _UNLIKE_AFTER, _RELIKE, _UNDISLIKE = 0.05, 0.2, 0.3, 0.25
_WITH_DURATION = 0.95  # share of views whose player reports the video's duration
_LATE_MIN_MS, _LATE_MAX_MS = 2 * 60_000, 6 * 3_600_000
_RETRY_MIN_MS, _RETRY_MAX_MS = 200, 3_000
_NET_MIN_MS, _NET_SPAN_MS = 15, 385
_IPV6_SHARE = 0.25


def _bot_views(kind: str) -> tuple[int, int]:
    """Views per bot session of a kind (the window kinds trip the shipped rules' limits)."""
    rules_in_use = bots.shipped()
    velocity, replays = rules_in_use.max_views_per_address_minute, rules_in_use.max_replays_per_day
    agents = rules_in_use.max_agents_per_address_hour
    return {
        HEADLESS_FARM: (5, 20),
        DATACENTER: (5, 20),
        VELOCITY: (2 * velocity, 4 * velocity),
        REPLAY_LOOP: (replays + 2, 3 * replays),
        THRESHOLD_GAMER: (10, 30),
        AGENT_ROTATION: (agents + 4, 3 * agents),
    }[kind]


# Threshold gamers boost a few small long videos: fresh accounts on rotating home-like addresses
# with browser agents, each view stopped just past the counting threshold.
_GAMED_VIDEOS = 3
_GAMED_MIN_DURATION_SECS = 600.0
_STATIC_BOTS = frozenset({HEADLESS_FARM, DATACENTER})  # their signal needs no window
_BURST_MAX_MS = 60_000  # the longest a velocity or replay-loop burst takes to send
# Agent rotation: one home-like address, a new browser agent and anonymous session each view, all in
# one clock hour. At least 3 s apart, no 60 s holds more than 21 of its views (the velocity limit
# is 30): only the rotation signal catches it. At most 6 s apart, a session (at most 24 views) lasts
# under 2.5 minutes and fits many times in the short runs of the tests and the quick benchmark.
_ROTATION_GAP_MS = (3_000, 6_000)
_IMPOSSIBLE_SHARE = 3  # one headless-farm session in this many sends an impossible agent
_BOT_WARMUP_MS = 5 * 60_000
_BOT_MIN_DURATION_SECS = 40.0
_BOT_MAX_WATCH_SECS = 300.0

_CHROME_JA3 = "cd08e31494f9531f560d64c695473da9"
_FIREFOX_JA3 = "b20b44b18b853ef29ab773e921b03422"
_SAFARI_JA3 = "773906b0efdefa24a7f2b8eb6985bf37"
BROWSERS: tuple[tuple[str, str], ...] = (
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.0.0 Safari/537.36",
        _CHROME_JA3,
    ),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.4 Safari/605.1.15",
        _SAFARI_JA3,
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.4 Mobile/15E148 Safari/604.1",
        _SAFARI_JA3,
    ),
    (
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.6367.82 Mobile Safari/537.36",
        _CHROME_JA3,
    ),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0", _FIREFOX_JA3),
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.67",
        _CHROME_JA3,
    ),
    (
        "Mozilla/5.0 (SMART-TV; Linux; Tizen 7.0) AppleWebKit/537.36 (KHTML, like Gecko) "
        "SamsungBrowser/5.0 Chrome/94.0.4606.31 TV Safari/537.36",
        _CHROME_JA3,
    ),
)


def _rotation_agents() -> tuple[tuple[str, str], ...]:
    """Real browsers of the last few years on real platforms (Chrome, Edge, Firefox, Safari on
    desktops and phones), with their TLS fingerprints: none is scripted or impossible."""
    webkit = "AppleWebKit/537.36 (KHTML, like Gecko)"
    safari = "AppleWebKit/605.1.15 (KHTML, like Gecko)"
    desktops = ("Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 10_15_7", "X11; Linux x86_64")
    geckos = ("Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 14.4", "X11; Ubuntu; Linux x86_64")
    agents = [
        (f"Mozilla/5.0 ({os}) {webkit} Chrome/{v}.0.0.0 Safari/537.36", _CHROME_JA3)
        for os in desktops
        for v in range(110, 132)
    ]
    edges = [(v, f"Edg/{v}.0.{2300 + v}.{v}") for v in range(110, 132)]
    agents += [
        (f"Mozilla/5.0 ({desktops[0]}) {webkit} Chrome/{v}.0.0.0 Safari/537.36 {edge}", _CHROME_JA3)
        for v, edge in edges
    ]
    agents += [
        (f"Mozilla/5.0 (Linux; Android {a}; K) {webkit} Chrome/{v}.0.0.0 Mobile Safari/537.36", _CHROME_JA3)
        for a in (12, 13, 14)
        for v in range(118, 132)
    ]
    agents += [
        (f"Mozilla/5.0 ({os}; rv:{v}.0) Gecko/20100101 Firefox/{v}.0", _FIREFOX_JA3)
        for os in geckos
        for v in range(110, 134)
    ]
    for major in (15, 16, 17):
        for minor in range(7):
            version = f"Version/{major}.{minor}"
            mac = f"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) {safari} {version} Safari/605.1.15"
            phone = f"Mozilla/5.0 (iPhone; CPU iPhone OS {major}_{minor} like Mac OS X) {safari} {version}"
            agents += [(mac, _SAFARI_JA3), (f"{phone} Mobile/15E148 Safari/604.1", _SAFARI_JA3)]
    return tuple(agents)


# What bots that rotate their agent send (one agent of these each view).
ROTATION_AGENTS: tuple[tuple[str, str], ...] = _rotation_agents()
# Agents no real client sends (a browser version years ahead, a Windows that does not exist, an
# iPhone on Windows): what some headless farms send instead of a headless agent.
IMPOSSIBLE_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/312.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Windows NT 11.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:240.0) Gecko/20100101 Firefox/240.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X; Windows NT 10.0) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
)
HEADLESS_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
)
# First octets of residential-looking addresses: humans and the subtler bots draw from disjoint sets.
_HOME_V4 = (24, 67, 68, 71, 73, 76, 81, 86, 92, 98, 174, 189, 201)
_HOME_V6 = (0x2601, 0x2A02)
_BOT_V4 = (45, 77, 91, 185, 196)

_Ctx = tuple[str | None, str, str, str, str]  # user_id, session_id, ip, user_agent, ja3


@dataclass(frozen=True)
class TrafficConfig:
    """What to generate. Stops after `events` items or `duration_secs` of send time, whichever first."""

    seed: int = 0
    videos: int = 200
    creators: int = 0  # 0: one creator per five videos
    viewers: int = 5_000
    events: int | None = 10_000
    duration_secs: float | None = None
    rate: float = 1_000.0  # events a second, retries included
    start_ms: int = DEFAULT_START_MS
    bot_fraction: float = 0.0  # share of events sent by bots
    bot_kinds: tuple[str, ...] = BOT_KINDS
    retry_rate: float = 0.02  # share of events the client sends again, identical
    late_rate: float = 0.03  # share of human sessions delivered minutes to hours late
    zipf_exponent: float = 1.1
    logged_in_share: float = 0.7
    heartbeat_secs: float = 30.0
    warm_start: bool = True

    def __post_init__(self) -> None:
        if self.events is None and self.duration_secs is None:
            raise InvalidSetting("events or duration_secs must be set (both are None)")
        for name in ("bot_fraction", "retry_rate", "late_rate", "logged_in_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidSetting(f"{name} must be within [0, 1] (got {value!r})")
        if self.bot_fraction >= 1.0:
            raise InvalidSetting(f"bot_fraction must be below 1 (got {self.bot_fraction!r})")
        unknown = set(self.bot_kinds) - set(BOT_KINDS)
        if unknown:
            raise InvalidSetting(f"bot_kinds must be among {BOT_KINDS} (got {sorted(unknown)})")
        if self.bot_fraction > 0 and not self.bot_kinds:
            raise InvalidSetting("bot_fraction > 0 needs at least one of bot_kinds")
        if self.videos < 1 or self.viewers < 1 or self.rate <= 0:
            raise InvalidSetting(f"videos, viewers and rate must be positive (got {self})")
        if not 0 < self.heartbeat_secs * 1000 < rules.PRESENCE_MS:
            raise InvalidSetting(f"heartbeat_secs must be within (0, 60) (got {self.heartbeat_secs!r})")


@dataclass(frozen=True, slots=True)
class Generated:
    """One event to send: the JSON-ready dict (no ingest_ts), who sent it, and when (ms from start)."""

    event: dict[str, Any]
    label: str
    send_at_ms: int
    retry: bool = False
    late: bool = False


def catalog_of(config: TrafficConfig) -> Catalog:
    return make_catalog(config.seed, config.videos, config.creators, config.zipf_exponent)


def catalog_rows(config: TrafficConfig) -> list[CatalogRow]:
    """The catalog the traffic is drawn from, as rows for the relational store."""
    return list(catalog_of(config).rows)


def generate(config: TrafficConfig) -> Iterator[Generated]:
    """The traffic of `config`, in send order; the same config always gives the same items."""
    return _Traffic(config).run()


def _mix(*parts: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps): stable across runs and platforms."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = ((x ^ part) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def _ipv4(first_octets: tuple[int, ...], h: int) -> str:
    octets = (first_octets[h % len(first_octets)], (h >> 8) & 0xFF, (h >> 16) & 0xFF, (h >> 24) % 254 + 1)
    return ".".join(map(str, octets))


def _home_address(seed: int, household: int) -> str:
    """A residential-looking IPv4 or IPv6 address of a household (never a data-centre range)."""
    h = _mix(seed, household, 0xADD)
    if (h >> 40) % 100 < _IPV6_SHARE * 100:
        prefix = _HOME_V6[h % len(_HOME_V6)]
        return str(ipaddress.IPv6Address((prefix << 112) | ((h >> 8) & (2**48 - 1)) << 64 | (h >> 32)))
    return _ipv4(_HOME_V4, h)


def _datacenter_address(h: int) -> str:
    networks = bots.shipped().datacenter.networks
    network = networks[h % len(networks)]
    return str(network.network_address + 1 + (h >> 8) % (network.num_addresses - 2))


class _Session:
    """A human session in progress: its viewer, its delivery delay and the videos it has seen."""

    __slots__ = ("ctx", "logged_in", "seen", "shift")

    def __init__(self, ctx: _Ctx, shift: int, seen: list[int]) -> None:
        self.ctx = ctx
        self.logged_in = ctx[0] is not None
        self.shift = shift
        self.seen = seen


class _Traffic:
    """The simulation: a heap of what happens next, keyed by send time, emitted in order.

    Heap items are tagged tuples: ("w", session) starts a session's next video, ("b", session,
    video, at, end) is a heartbeat that schedules the next one, ("e", *plan) is one event, ("r",
    event, label) a retry. Human sessions unfold lazily, so the heap holds about one item per
    session in progress.
    """

    def __init__(self, config: TrafficConfig) -> None:
        self.config = config
        self.catalog = catalog_of(config)
        self.durations = [row.duration_secs for row in self.catalog.rows]
        self.video_ids = [row.video_id for row in self.catalog.rows]
        long_videos = [i for i, d in enumerate(self.durations) if d >= _BOT_MIN_DURATION_SECS]
        self.bot_videos = long_videos or list(range(len(self.durations)))
        # The least popular long videos (Zipf rank order), never one of the popular half: there the
        # humans' views would outnumber the gamed ones and hide the bunching.
        quiet = range(len(self.durations) // 2, len(self.durations))
        longest = (
            [i for i in quiet if self.durations[i] >= _GAMED_MIN_DURATION_SECS]
            or [i for i in quiet if self.durations[i] >= _BOT_MIN_DURATION_SECS]
            or self.bot_videos
        )
        self.gamed_videos = longest[-_GAMED_VIDEOS:]
        self.beat_ms = int(config.heartbeat_secs * 1000)
        self.rng = random.Random(f"tally-traffic-{config.seed}")
        self.heap: list[tuple[int, int, tuple[Any, ...]]] = []
        self.seq = self.made = self.sessions = self.bot_sessions = 0
        self.history: dict[int, list[int]] = {}
        self.address_minute: dict[tuple[str, int], int] = {}
        self.address_agents: dict[tuple[str, int], set[str]] = {}
        self.viewer_day: dict[tuple[int, str, int], int] = {}

    def _push(self, send: int, item: tuple[Any, ...]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (send, self.seq, item))

    def _net(self) -> int:
        return _NET_MIN_MS + int(self.rng.random() * _NET_SPAN_MS)

    def _viewer(self, index: int) -> tuple[str | None, str, str, str]:
        h = _mix(self.config.seed, index, 0x7E1)
        logged_in = h % 10_000 < self.config.logged_in_share * 10_000
        household = index - 1 if index and (h >> 16) % 6 == 0 else index  # some share a home address
        agent, ja3 = BROWSERS[(h >> 24) % len(BROWSERS)]
        return (
            (f"u{index:07d}" if logged_in else None),
            _home_address(self.config.seed, household),
            agent,
            ja3,
        )

    @staticmethod
    def _watch(rng: random.Random, duration: float) -> float:
        if rng.random() < _BOUNCE:
            watched = rng.uniform(1.0, min(rules.MIN_WATCH_SECS - 1.0, duration))
        else:
            watched = min(duration * rng.betavariate(1.6, 1.2), rng.expovariate(1 / _ATTENTION_SECS))
        return max(1.0, round(min(watched, duration), 1))

    def _expected_session_events(self) -> float:
        """The mean events of a human session (sampled aside), which sizes the arrival rate."""
        rng, samples, beats = random.Random(f"tally-rate-{self.config.seed}"), 4_000, 0
        for _ in range(samples):
            watch_ms = int(self._watch(rng, self.durations[self.catalog.pick(rng.random())]) * 1000)
            beats += -(-watch_ms // self.beat_ms) + 1
        reactions = _LIKE * (1 + _DOUBLE_LIKE + _UNLIKE_AFTER * (1 + _RELIKE))
        reactions += _DISLIKE * (1 + _UNDISLIKE) + _STRAY_UNLIKE
        per_video = (1 + _REFRESH) * beats / samples + self.config.logged_in_share * reactions
        return per_video / _LEAVE

    def _start_session(self, t0: int) -> None:
        rng, config = self.rng, self.config
        index = rng.randrange(config.viewers)
        user, ip, agent, ja3 = self._viewer(index)
        self.sessions += 1
        shift = 0
        if rng.random() < config.late_rate:
            shift = int(math.exp(rng.uniform(math.log(_LATE_MIN_MS), math.log(_LATE_MAX_MS))))
        ctx: _Ctx = (user, f"s{config.seed}-{self.sessions}", ip, agent, ja3)
        self._next_video(_Session(ctx, shift, self.history.setdefault(index, [])), t0)

    def _human(self, session: _Session, kind: str, video: int, at: int, watch: float | None = None) -> None:
        send = at + self._net()
        if send >= 0:
            ts = self.config.start_ms + at - session.shift
            self._push(send, ("e", kind, video, ts, watch, session.ctx, HUMAN))

    def _next_video(self, session: _Session, t: int) -> None:
        """Watch the session's next video from `t`, or end the session; what ends before 0 is skipped."""
        rng, seen = self.rng, session.seen
        while True:
            video = rng.choice(seen) if seen and rng.random() < _REWATCH else self.catalog.pick(rng.random())
            for watch_no in range(2 if rng.random() < _REFRESH else 1):
                watch = self._watch(rng, self.durations[video])
                end = t + int(watch * 1000)
                if end >= 0:
                    first = t if t >= 0 else t + -(t // self.beat_ms) * self.beat_ms
                    if first < end:
                        self._push(first + self._net(), ("b", session, video, first, end))
                    self._human(session, "view", video, end, watch)
                    if session.logged_in and watch_no == 0:
                        self._reactions(session, video, t, end)
                t = end + rng.randint(1_000, 8_000)
            if video not in seen:
                seen.append(video)
                del seen[:-8]
            if rng.random() < _LEAVE:
                return
            t += rng.randint(2_000, 30_000)
            if t >= 0:
                self._push(t, ("w", session))
                return

    def _reactions(self, session: _Session, video: int, start: int, end: int) -> None:
        """Like/unlike/dislike/undislike churn of a logged-in viewer around one watch."""
        rng, draw = self.rng, self.rng.random()
        at = start + int((end - start) * rng.random())
        if draw < _LIKE:
            self._human(session, "like", video, at)
            if rng.random() < _DOUBLE_LIKE:
                self._human(session, "like", video, at + rng.randint(150, 1_500))
            if rng.random() < _UNLIKE_AFTER:
                at = max(at, end) + rng.randint(2_000, 20_000)
                self._human(session, "unlike", video, at)
                if rng.random() < _RELIKE:
                    self._human(session, "like", video, at + rng.randint(1_000, 10_000))
        elif draw < _LIKE + _DISLIKE:
            self._human(session, "dislike", video, at)
            if rng.random() < _UNDISLIKE:
                self._human(session, "undislike", video, max(at, end) + rng.randint(1_000, 15_000))
        elif draw < _LIKE + _DISLIKE + _STRAY_UNLIKE:
            self._human(session, "unlike", video, at)  # a stale page un-likes a video never liked

    def _rotation_times(self, t0: int) -> list[int]:
        """When the views of an agent-rotation session arriving at `t0` happen: a few seconds apart,
        moved into the next clock hour if they would straddle one (they must share an hour)."""
        rng, start = self.rng, self.config.start_ms
        times = [t0]
        for _ in range(rng.randint(*_bot_views(AGENT_ROTATION)) - 1):
            times.append(times[-1] + rng.randint(*_ROTATION_GAP_MS))
        last_hour = rules.hour_of(start + times[-1])
        if rules.hour_of(start + t0) != last_hour:
            move = last_hour * rules.HOUR_MS + 1_000 - (start + t0)
            times = [t + move for t in times]
        return times

    def _plan_bot(
        self, kind: str, t0: int, times: list[int] | None = None
    ) -> list[tuple[int, tuple[Any, ...]]]:
        """One bot session of `kind` (at `times` if given): views with watch_secs >= 30 that trip its
        signal."""
        rng, config = self.rng, self.config
        self.bot_sessions += 1
        n = self.bot_sessions
        h = _mix(config.seed, n, 0xB07)
        count = len(times) if times else rng.randint(*_bot_views(kind))
        agent, ja3 = BROWSERS[h % len(BROWSERS)]
        ips = [_ipv4(_BOT_V4, h >> 8)]
        user: str | None = None
        video = rng.choice(self.bot_videos)
        if kind == VELOCITY:  # one address, a burst of 20 s inside one minute
            into = (config.start_ms + t0) % rules.MINUTE_MS
            begin = t0 if into < rules.MINUTE_MS - 25_000 else t0 + rules.MINUTE_MS - into + 500
            times = sorted(begin + rng.randrange(0, 20_000) for _ in range(count))
        elif times is None:
            gap = (800, 1_500) if kind == REPLAY_LOOP else (3_000, 15_000)
            times = [t0]
            for _ in range(count - 1):
                times.append(times[-1] + rng.randint(*gap))
        if kind == REPLAY_LOOP:  # one account, one video, one day, rotating proxies
            user = f"u{config.seed}x{n}"
            ips = [_ipv4(_BOT_V4, _mix(config.seed, n, i)) for i in range(count)]
            first, last = config.start_ms + times[0], config.start_ms + times[-1]
            if rules.day_of(first) != rules.day_of(last):
                move = rules.day_of(last) * rules.DAY_MS + 1_000 - first
                times = [t + move for t in times]
        elif kind == THRESHOLD_GAMER:
            video = rng.choice(self.gamed_videos)
            ips = [_ipv4(_BOT_V4, _mix(config.seed, n, 0x6A + i)) for i in range(count)]
        elif kind == HEADLESS_FARM:  # some farms send an impossible agent instead of a headless one
            impossible = (h >> 40) % _IMPOSSIBLE_SHARE == 0
            agents = IMPOSSIBLE_AGENTS if impossible else HEADLESS_AGENTS
            agent = agents[h % len(agents)]
        elif kind == DATACENTER:
            ips, ja3 = (
                [_datacenter_address(h >> 4)],
                sorted(bots.SHIPPED.bad_ja3)[h % len(bots.SHIPPED.bad_ja3)],
            )
        clients, shortest = [(agent, ja3)], rules.MIN_WATCH_SECS
        if kind == AGENT_ROTATION:  # a new agent each view, watched past the bunching window
            clients = rng.sample(ROTATION_AGENTS, min(count, len(ROTATION_AGENTS)))
            shortest = bots.SHIPPED.near_threshold_below
        session, out = f"b{config.seed}-{n}", []
        for i, t in enumerate(times):
            if kind in _STATIC_BOTS or kind == AGENT_ROTATION:
                video = rng.choice(self.bot_videos)
            longest = max(shortest, min(self.durations[video], _BOT_MAX_WATCH_SECS))
            watch = round(rng.uniform(shortest, longest), 1)
            if kind == THRESHOLD_GAMER:  # a fresh account each view, stopped just past 30 s
                user, watch = f"g{config.seed}x{n}-{i}", round(rng.uniform(rules.MIN_WATCH_SECS, 30.9), 1)
            own_session = session if user and kind != THRESHOLD_GAMER else f"{session}-{i}"
            ctx: _Ctx = (user, own_session, ips[i % len(ips)], *clients[i % len(clients)])
            out.append((t + self._net(), ("e", "view", video, config.start_ms + t, watch, ctx, kind)))
        return out

    def _event(self, plan: tuple[Any, ...]) -> dict[str, Any] | None:
        """The event dict of a plan, or None for a human view that would look like a bot."""
        _, kind, video, ts, watch, (user, session, ip, agent, ja3), label = plan
        if kind == "view" and label == HUMAN and not self._human_view_ok(video, ts, user, session, ip, agent):
            return None
        self.made += 1
        event: dict[str, Any] = {
            "event_id": f"e{self.config.seed}-{self.made}",
            "type": kind,
            "video_id": self.video_ids[video],
            "ts": ts,
        }
        if user is not None:
            event["user_id"] = user
        event.update(session_id=session, ip=ip, user_agent=agent, ja3=ja3)
        if watch is not None:
            event["watch_secs"] = watch
            if label != HUMAN or self.rng.random() < _WITH_DURATION:
                event["video_duration_secs"] = self.durations[video]
        return event

    def _human_view_ok(
        self, video: int, ts: int, user: str | None, session: str, ip: str, agent: str
    ) -> bool:
        """Keep humans within the velocity, replay and rotation limits (a shared home can get close).

        Velocity slides: every 60 s holding a view lies in its minute and the two beside it, so a
        view is kept only while the views kept from its address in those three minutes are fewer
        than the limit; then no 60 s of an address ever holds more than the limit, whatever the
        order the views are made in (the last one made in any 60 s saw all the others)."""
        limits, minute = bots.SHIPPED, rules.minute_of(ts)
        around = sum(self.address_minute.get((ip, m), 0) for m in (minute - 1, minute, minute + 1))
        if around >= limits.max_views_per_address_minute:
            return False
        viewer = (video, user if user is not None else f"anon:{session}", rules.day_of(ts))
        if self.viewer_day.get(viewer, 0) >= limits.max_replays_per_day:
            return False
        agents = self.address_agents.setdefault((ip, rules.hour_of(ts)), set())
        if agent not in agents and len(agents) >= limits.max_agents_per_address_hour:
            return False
        self.address_minute[(ip, minute)] = self.address_minute.get((ip, minute), 0) + 1
        self.viewer_day[viewer] = self.viewer_day.get(viewer, 0) + 1
        agents.add(agent)
        return True

    def _start_bot(self, kinds: tuple[str, ...], t0: int, horizon: float) -> int:
        """A bot session (its event count); a burst that would be cut by the start or the end of the
        traffic becomes a static bot (whose signal holds for any part of it). An agent-rotation
        session, minutes long, is timed first and must end before the horizon."""
        kind = kinds[self.rng.randrange(len(kinds))]
        times = self._rotation_times(t0) if kind == AGENT_ROTATION else None
        last = times[-1] if times else t0 + _BURST_MAX_MS
        if kind not in _STATIC_BOTS and not 0 <= t0 <= last <= horizon:
            static = [k for k in kinds if k in _STATIC_BOTS]
            if not static:
                return 1
            kind, times = static[self.rng.randrange(len(static))], None
        plans = self._plan_bot(kind, t0, times)
        for send, plan in plans:
            if send >= 0:
                self._push(send, plan)
        return len(plans)

    def run(self) -> Iterator[Generated]:
        config, rng = self.config, self.rng
        human_rate = config.rate * (1 - config.bot_fraction) / (1 + config.retry_rate)
        human_per_ms = human_rate / 1000 / self._expected_session_events()
        kinds = tuple(k for k in BOT_KINDS if k in config.bot_kinds)
        bot_per_ms = config.rate * config.bot_fraction / 1000  # bot events a ms
        limit = config.events if config.events is not None else math.inf
        until = config.duration_secs * 1000 if config.duration_secs is not None else math.inf
        horizon = min(until, limit / config.rate * 1000) * 0.95
        next_human = float(-WARMUP_MS if config.warm_start else 0)
        next_bot = float(-_BOT_WARMUP_MS if config.warm_start else 0) if bot_per_ms else math.inf
        emitted = 0
        while emitted < limit:
            head = self.heap[0][0] if self.heap else math.inf
            if min(next_human, next_bot) <= head:
                if next_human <= next_bot:
                    self._start_session(int(next_human))
                    next_human += rng.expovariate(human_per_ms)
                else:
                    size = self._start_bot(kinds, int(next_bot), horizon)
                    next_bot += rng.expovariate(bot_per_ms / size)  # bot events keep their share
                continue
            send, _, item = heapq.heappop(self.heap)
            if send >= until:
                return
            tag = item[0]
            if tag == "w":
                self._next_video(item[1], send)
                continue
            if tag == "r":
                event, label, retry = item[1], item[2], True
            else:
                if tag == "b":
                    _, session, video, at, end = item
                    if at + self.beat_ms < end:
                        self._push(
                            at + self.beat_ms + self._net(), ("b", session, video, at + self.beat_ms, end)
                        )
                    item = (
                        "e",
                        "heartbeat",
                        video,
                        config.start_ms + at - session.shift,
                        None,
                        session.ctx,
                        HUMAN,
                    )
                built = self._event(item)
                if built is None:
                    continue
                event, label, retry = built, item[6], False
                if rng.random() < config.retry_rate:
                    self._push(send + rng.randint(_RETRY_MIN_MS, _RETRY_MAX_MS), ("r", dict(event), label))
            emitted += 1
            yield Generated(event, label, send, retry, config.start_ms + send - event["ts"] > LATE_MS)


def ground_truth(items: Iterable[Generated]) -> dict[str, Any]:
    """What the traffic holds: per label its events (retries included), distinct views and retries."""
    labels: dict[str, dict[str, int]] = {}
    totals = {"events": 0, "retries": 0, "late_events": 0}
    for item in items:
        counts = labels.setdefault(item.label, {"events": 0, "views": 0, "retries": 0})
        counts["events"] += 1
        totals["events"] += 1
        totals["late_events"] += item.late
        if item.retry:
            counts["retries"] += 1
            totals["retries"] += 1
        elif item.event["type"] == "view":
            counts["views"] += 1
    return {**totals, "labels": dict(sorted(labels.items()))}


def truth_path(events_path: Path) -> Path:
    """The ground-truth JSON beside an events JSONL file: `name.jsonl` → `name.truth.json`."""
    return events_path.with_name(events_path.name.removesuffix(".jsonl") + ".truth.json")


def write_traffic(
    items: Iterable[Generated], path: Path, config: TrafficConfig | None = None
) -> dict[str, Any]:
    """Write the events as JSONL at `path` and the ground truth beside it (with the event ids of
    each bot kind); return the ground truth."""
    encoder = msgspec.json.Encoder()
    kept: list[Generated] = []
    bot_ids: dict[str, list[str]] = {}
    with path.open("wb") as out:
        for item in items:
            out.write(encoder.encode(item.event) + b"\n")
            kept.append(Generated({"type": item.event["type"]}, item.label, 0, item.retry, item.late))
            if item.label != HUMAN and not item.retry:
                bot_ids.setdefault(item.label, []).append(item.event["event_id"])
    truth = ground_truth(kept)
    truth["bot_event_ids"] = bot_ids
    if config is not None:
        truth["config"] = asdict(config)
    truth_path(path).write_bytes(msgspec.json.format(encoder.encode(truth)))
    return truth
