"""The bots of generated traffic: how many views a session of each kind sends, and how its
sessions are planned so that each trips its own signal of the shipped rules."""

from __future__ import annotations

import random
from typing import Any

from counting import bots, rules
from counting.traffic_clients import (
    BOT_V4,
    BROWSERS,
    HEADLESS_AGENTS,
    IMPOSSIBLE_AGENTS,
    ROTATION_AGENTS,
    Ctx,
    datacenter_address,
    ipv4,
    mix,
)
from counting.traffic_config import (
    AGENT_ROTATION,
    DATACENTER,
    HEADLESS_FARM,
    REPLAY_LOOP,
    THRESHOLD_GAMER,
    VELOCITY,
    TrafficConfig,
)

BOT_WARMUP_MS = 5 * 60_000


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
_BOT_MIN_DURATION_SECS = 40.0
_BOT_MAX_WATCH_SECS = 300.0


class BotPlanner:
    """The bot half of the simulation, mixed into `counting.traffic`'s: it picks the videos bots
    watch and plans each bot session as events pushed on the simulation's heap."""

    config: TrafficConfig
    rng: random.Random
    durations: list[float]
    bot_sessions: int
    bot_videos: list[int]
    gamed_videos: list[int]

    def _push(self, send: int, item: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _net(self) -> int:
        raise NotImplementedError

    def _pick_bot_videos(self) -> None:
        """The videos bots watch: the long ones; threshold gamers a few quiet long ones."""
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
        h = mix(config.seed, n, 0xB07)
        count = len(times) if times else rng.randint(*_bot_views(kind))
        agent, ja3 = BROWSERS[h % len(BROWSERS)]
        ips = [ipv4(BOT_V4, h >> 8)]
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
            ips = [ipv4(BOT_V4, mix(config.seed, n, i)) for i in range(count)]
            first, last = config.start_ms + times[0], config.start_ms + times[-1]
            if rules.day_of(first) != rules.day_of(last):
                move = rules.day_of(last) * rules.DAY_MS + 1_000 - first
                times = [t + move for t in times]
        elif kind == THRESHOLD_GAMER:
            video = rng.choice(self.gamed_videos)
            ips = [ipv4(BOT_V4, mix(config.seed, n, 0x6A + i)) for i in range(count)]
        elif kind == HEADLESS_FARM:  # some farms send an impossible agent instead of a headless one
            impossible = (h >> 40) % _IMPOSSIBLE_SHARE == 0
            agents = IMPOSSIBLE_AGENTS if impossible else HEADLESS_AGENTS
            agent = agents[h % len(agents)]
        elif kind == DATACENTER:
            ips, ja3 = (
                [datacenter_address(h >> 4)],
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
            ctx: Ctx = (user, own_session, ips[i % len(ips)], *clients[i % len(clients)])
            out.append((t + self._net(), ("e", "view", video, config.start_ms + t, watch, ctx, kind)))
        return out

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
