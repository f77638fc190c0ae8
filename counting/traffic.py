"""Seeded, realistic traffic over a video catalog: human sessions and labelled bots, with send times.

Time is real: an event's `ts` is when it happened and `send_at_ms` (from `start_ms`) when the client
sends it, so `parse_event(event, start_ms + send_at_ms)` accepts every generated event. Sessions
arrive as a Poisson process sized to `rate`; with `warm_start` the platform is already busy at 0.
This module simulates the humans and runs the clock; the bots are planned in `traffic_bots`, the
agents and addresses drawn in `traffic_clients`, the ground truth written by `traffic_truth`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from typing import Any

from counting import bots, rules
from counting.catalog import Catalog, CatalogRow, make_catalog
from counting.traffic_bots import BOT_WARMUP_MS, BotPlanner
from counting.traffic_clients import (
    BROWSERS,
    HEADLESS_AGENTS,
    IMPOSSIBLE_AGENTS,
    ROTATION_AGENTS,
    Ctx,
    home_address,
    mix,
)
from counting.traffic_config import (
    AGENT_ROTATION,
    BOT_KINDS,
    DATACENTER,
    DEFAULT_START_MS,
    HEADLESS_FARM,
    HUMAN,
    LABELS,
    REPLAY_LOOP,
    THRESHOLD_GAMER,
    VELOCITY,
    Generated,
    TrafficConfig,
)
from counting.traffic_truth import ground_truth, truth_path, write_traffic

__all__ = [
    "AGENT_ROTATION",
    "BOT_KINDS",
    "BROWSERS",
    "DATACENTER",
    "DEFAULT_START_MS",
    "HEADLESS_AGENTS",
    "HEADLESS_FARM",
    "HUMAN",
    "IMPOSSIBLE_AGENTS",
    "LABELS",
    "LATE_MS",
    "REPLAY_LOOP",
    "ROTATION_AGENTS",
    "THRESHOLD_GAMER",
    "VELOCITY",
    "WARMUP_MS",
    "Generated",
    "TrafficConfig",
    "catalog_of",
    "catalog_rows",
    "generate",
    "ground_truth",
    "truth_path",
    "write_traffic",
]

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


def catalog_of(config: TrafficConfig) -> Catalog:
    return make_catalog(config.seed, config.videos, config.creators, config.zipf_exponent)


def catalog_rows(config: TrafficConfig) -> list[CatalogRow]:
    """The catalog the traffic is drawn from, as rows for the relational store."""
    return list(catalog_of(config).rows)


def generate(config: TrafficConfig) -> Iterator[Generated]:
    """The traffic of `config`, in send order; the same config always gives the same items."""
    return _Traffic(config).run()


def _horizon(planned: float, now: float, emitted: int, limit: float) -> float:
    """When a bot session must end to be whole: the planned horizon, or sooner when the traffic so
    far runs faster than its rate (humans send more than expected): the events left at the rate
    seen, with a 20 % margin. A burst cut by the end of the traffic would not trip its signal."""
    if limit == math.inf or emitted < 100 or now <= 0:
        return planned
    left_ms = (limit - emitted) * now / emitted
    return min(planned, now + 0.8 * left_ms)


class _Session:
    """A human session in progress: its viewer, its delivery delay and the videos it has seen."""

    __slots__ = ("ctx", "logged_in", "seen", "shift")

    def __init__(self, ctx: Ctx, shift: int, seen: list[int]) -> None:
        self.ctx = ctx
        self.logged_in = ctx[0] is not None
        self.shift = shift
        self.seen = seen


class _Traffic(BotPlanner):
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
        self._pick_bot_videos()
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
        h = mix(self.config.seed, index, 0x7E1)
        logged_in = h % 10_000 < self.config.logged_in_share * 10_000
        household = index - 1 if index and (h >> 16) % 6 == 0 else index  # some share a home address
        agent, ja3 = BROWSERS[(h >> 24) % len(BROWSERS)]
        return (
            (f"u{index:07d}" if logged_in else None),
            home_address(self.config.seed, household),
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
        ctx: Ctx = (user, f"s{config.seed}-{self.sessions}", ip, agent, ja3)
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
        viewer = (
            video,
            user if user is not None else f"{rules.ANON_VIEWER_PREFIX}{session}",
            rules.day_of(ts),
        )
        if self.viewer_day.get(viewer, 0) >= limits.max_replays_per_day:
            return False
        agents = self.address_agents.setdefault((ip, rules.hour_of(ts)), set())
        if agent not in agents and len(agents) >= limits.max_agents_per_address_hour:
            return False
        self.address_minute[(ip, minute)] = self.address_minute.get((ip, minute), 0) + 1
        self.viewer_day[viewer] = self.viewer_day.get(viewer, 0) + 1
        agents.add(agent)
        return True

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
        next_bot = float(-BOT_WARMUP_MS if config.warm_start else 0) if bot_per_ms else math.inf
        emitted = 0
        while emitted < limit:
            head = self.heap[0][0] if self.heap else math.inf
            if min(next_human, next_bot) <= head:
                if next_human <= next_bot:
                    self._start_session(int(next_human))
                    next_human += rng.expovariate(human_per_ms)
                else:
                    size = self._start_bot(kinds, int(next_bot), _horizon(horizon, next_bot, emitted, limit))
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
