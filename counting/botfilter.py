"""`BotFilter`: one version of the bot rules (`counting.botrules`) made ready for the hot paths: the
signals of a client and of a view as a mask, and the verdict of every mask a table lookup."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from counting import signals
from counting.addresses import AddressRanges
from counting.botrules import BotRules
from counting.event import Event
from counting.rules import MIN_WATCH_SECS, RULES_VERSION
from counting.signals import ALLOWED_BIT, BIT, MASK_ORDER, REASONS, Signal, score

_SCRIPTED_BIT = BIT[signals.SCRIPTED_AGENT]
_DATACENTER_BIT = BIT[signals.DATACENTER_IP]
_BAD_TLS_BIT = BIT[signals.BAD_TLS]
_WATCH_BIT = BIT[signals.WATCH_ANOMALY]
_VELOCITY_BIT = BIT[signals.ADDRESS_VELOCITY]
_REPLAY_BIT = BIT[signals.REPLAY_RATE]
_RATIO_BIT = BIT[signals.WATCH_RATIO]
_BUNCHING_BIT = BIT[signals.THRESHOLD_BUNCHING]
_MISSING_AGENT_BIT = BIT[signals.MISSING_AGENT]
_IMPOSSIBLE_AGENT_BIT = BIT[signals.IMPOSSIBLE_AGENT]
_ROTATION_BIT = BIT[signals.AGENT_ROTATION]


class BotFilter:
    """One version of the bot rules, ready for the hot paths: the signals of a client are
    remembered per client (the counter sees the same clients again and again), and the verdict of
    every combination of signals is a table lookup (`rejection_by_mask`)."""

    def __init__(self, rules: BotRules) -> None:
        self.rules = rules
        self.version = f"{RULES_VERSION}+{rules.version}"  # the counting code's, then the file's
        thresholds = rules.thresholds
        self.max_views_per_address_minute = thresholds.max_views_per_address_minute
        self.max_replays_per_day = thresholds.max_replays_per_day
        self.watch_overrun_factor = thresholds.watch_overrun_factor
        self.watch_overrun_slack_secs = thresholds.watch_overrun_slack_secs
        self.max_watch_secs = thresholds.max_watch_secs
        self.min_watch_ratio = thresholds.min_watch_ratio
        self.bunch_window_secs = thresholds.bunch_window_secs
        self.bunch_min_views = thresholds.bunch_min_views
        self.bunch_min_share = thresholds.bunch_min_share
        self.max_agents_per_address_hour = thresholds.max_agents_per_address_hour
        self.near_threshold_below = MIN_WATCH_SECS + thresholds.bunch_window_secs
        self.reject_score = rules.score.reject
        self.soft_score = rules.score.soft
        self.signals: dict[str, Signal] = {name: Signal(name, rules.weight(name)) for name in REASONS}
        self.scripted_pattern = rules.agents.scripted_pattern
        self._scripted = re.compile(self.scripted_pattern)
        self.impossible_pattern = rules.agents.impossible_pattern
        self._impossible = re.compile(self.impossible_pattern)
        self.datacenter = AddressRanges(rules.addresses.datacenter)
        self.allowed = AddressRanges(rules.addresses.allow)
        self.bad_ja3 = frozenset(rules.tls.bad_ja3)
        self.client_mask: Callable[[str | None, str | None, str | None], int] = lru_cache(maxsize=262_144)(
            self._client_mask
        )
        self.is_datacenter_ip: Callable[[str | None], bool] = lru_cache(maxsize=262_144)(
            self._is_datacenter_ip
        )
        self.is_allowed_ip: Callable[[str | None], bool] = lru_cache(maxsize=262_144)(self._is_allowed_ip)
        # The pattern search costs microseconds; the agents are few (a client-mask miss, a new
        # address, must not search again).
        self.is_scripted_agent: Callable[[str | None], bool] = lru_cache(maxsize=65_536)(
            self._is_scripted_agent
        )
        self.is_impossible_agent: Callable[[str | None], bool] = lru_cache(maxsize=65_536)(
            self._is_impossible_agent
        )
        # The rejection reason of every mask (None: not rejected): `rejection_reason` evaluated once
        # per combination of signals, so a hot path decides a view with one lookup.
        self.rejection_by_mask: tuple[str | None, ...] = tuple(
            self.rejection_reason(self.signals_of(mask)) for mask in range(1 << len(MASK_ORDER))
        )
        # Whether a view of each mask is in the soft band (counted, flagged): `is_flagged` per mask.
        self.flagged_by_mask: tuple[bool, ...] = tuple(
            self.is_flagged(self.signals_of(mask)) for mask in range(1 << len(MASK_ORDER))
        )

    def _is_scripted_agent(self, user_agent: str | None) -> bool:
        return user_agent is not None and self._scripted.search(user_agent) is not None

    def is_missing_agent(self, user_agent: str | None) -> bool:
        """No user agent, or a blank one."""
        return user_agent is None or not user_agent.strip()

    def _is_impossible_agent(self, user_agent: str | None) -> bool:
        """An agent no real client sends (the rules' `impossible_pattern`); a missing one is not."""
        return not self.is_missing_agent(user_agent) and self._impossible.search(user_agent or "") is not None

    def _is_datacenter_ip(self, ip: str | None) -> bool:
        """In a data-centre range and not on the allow-list."""
        return ip is not None and ip in self.datacenter and not self.is_allowed_ip(ip)

    def _is_allowed_ip(self, ip: str | None) -> bool:
        return ip is not None and ip in self.allowed

    def is_bad_ja3(self, ja3: str | None) -> bool:
        return ja3 is not None and ja3.lower() in self.bad_ja3

    def is_watch_anomaly(self, watch_secs: float | None, duration_secs: float | None) -> bool:
        """Watched longer than the video allows, or longer than anyone plausibly watches."""
        if watch_secs is None:
            return False
        if watch_secs > self.max_watch_secs:
            return True
        if duration_secs is None:
            return False
        return watch_secs > duration_secs * self.watch_overrun_factor + self.watch_overrun_slack_secs

    def is_low_watch_ratio(self, watch_secs: float | None, duration_secs: float | None) -> bool:
        """Watched less than the minimum share of a video of known length."""
        if watch_secs is None or duration_secs is None:
            return False
        return watch_secs < duration_secs * self.min_watch_ratio

    def is_near_threshold(self, watch_secs: float | None, duration_secs: float | None) -> bool:
        """Stopped within the bunching window past the counting threshold, before the video's end
        (a video not much longer than the threshold is watched to its end there by everyone)."""
        if watch_secs is None or not MIN_WATCH_SECS <= watch_secs < self.near_threshold_below:
            return False
        return duration_secs is None or watch_secs < duration_secs - self.bunch_window_secs

    def is_bunched(self, near_views: int, qualified_views: int) -> bool:
        """Whether a video's day, with `near_views` of its `qualified_views` stopping near the
        threshold, shows views gamed past it. Both count first copies long enough to count that
        their static signals alone (`is_static_reject`) do not reject: views refused anyway do not
        dilute the share."""
        return near_views >= self.bunch_min_views and near_views >= self.bunch_min_share * qualified_views

    def is_high_velocity(self, views_from_address_last_minute: int) -> bool:
        """More views from one address in the 60 seconds up to a view (`address_views`) than allowed."""
        return views_from_address_last_minute > self.max_views_per_address_minute

    def is_agent_rotation(self, agents_from_address_this_hour: int) -> bool:
        """More distinct user agents from one address in one hour than allowed."""
        return agents_from_address_this_hour > self.max_agents_per_address_hour

    def is_replay_loop(self, views_by_viewer_of_video_today: int) -> bool:
        return views_by_viewer_of_video_today > self.max_replays_per_day

    def _client_mask(self, user_agent: str | None, ip: str | None, ja3: str | None) -> int:
        """The mask of the signals a client shows by itself (its agent, address and TLS
        fingerprint), with ALLOWED_BIT if its address is on the allow-list."""
        mask = 0
        if self.is_missing_agent(user_agent):
            mask |= _MISSING_AGENT_BIT
        elif self.is_scripted_agent(user_agent):
            mask |= _SCRIPTED_BIT
        if self.is_impossible_agent(user_agent):
            mask |= _IMPOSSIBLE_AGENT_BIT
        if self.is_allowed_ip(ip):
            mask |= ALLOWED_BIT
        elif self.is_datacenter_ip(ip):
            mask |= _DATACENTER_BIT
        if self.is_bad_ja3(ja3):
            mask |= _BAD_TLS_BIT
        return mask

    def view_mask(
        self,
        client: int,
        watch_secs: float | None,
        duration_secs: float | None,
        address_minute_views: int,
        viewer_day_views: int,
        bunched: bool = False,
        address_agents: int = 0,
    ) -> int:
        """The mask of every signal of a view, from its client's mask (`client_mask`), its watch
        time and its windows (views from its address in the 60 s up to it, views of its video by
        its viewer in its day, whether it stopped near the threshold on a bunched video day, and
        distinct agents from its address in its hour): `static_mask` and `window_mask`."""
        return self.static_mask(client, watch_secs, duration_secs) | self.window_mask(
            client, address_minute_views, viewer_day_views, bunched, address_agents
        )

    def static_mask(self, client: int, watch_secs: float | None, duration_secs: float | None) -> int:
        """The signals a view shows without any window: its client's and its watch time's."""
        mask = client & ~ALLOWED_BIT
        if self.is_watch_anomaly(watch_secs, duration_secs):
            mask |= _WATCH_BIT
        if self.is_low_watch_ratio(watch_secs, duration_secs):
            mask |= _RATIO_BIT
        return mask

    def window_mask(
        self,
        client: int,
        address_minute_views: int,
        viewer_day_views: int,
        bunched: bool = False,
        address_agents: int = 0,
    ) -> int:
        """The signals of a view's windows. An allowed address (`client` holds ALLOWED_BIT) never
        shows the velocity or the rotation signal."""
        mask = _BUNCHING_BIT if bunched else 0
        if not client & ALLOWED_BIT:
            if self.is_high_velocity(address_minute_views):
                mask |= _VELOCITY_BIT
            if self.is_agent_rotation(address_agents):
                mask |= _ROTATION_BIT
        if self.is_replay_loop(viewer_day_views):
            mask |= _REPLAY_BIT
        return mask

    def is_static_reject(self, client: int, watch_secs: float | None, duration_secs: float | None) -> bool:
        """Whether a view's static signals (its client's and its watch time's) reject it alone."""
        return self.rejection_by_mask[self.static_mask(client, watch_secs, duration_secs)] is not None

    def signals_of(self, mask: int) -> list[Signal]:
        """The signals of a mask, in MASK_ORDER."""
        return [self.signals[name] for bit, name in enumerate(MASK_ORDER) if mask >> bit & 1]

    def static_signals(self, event: Event) -> list[Signal]:
        """The signals one event shows on its own, without any window."""
        return self.signals_for(event, 0, 0)

    def signals_for(
        self,
        event: Event,
        address_minute_views: int,
        viewer_day_views: int,
        bunched: bool = False,
        address_agents: int = 0,
    ) -> list[Signal]:
        """Every signal of a view, given its windows (views from its address in the 60 s up to it,
        views of its video by its viewer in its day, whether it is near the threshold on a bunched
        day, distinct agents from its address in its hour)."""
        return self.signals_of(
            self.mask_for(event, address_minute_views, viewer_day_views, bunched, address_agents)
        )

    def mask_for(
        self,
        event: Event,
        address_minute_views: int,
        viewer_day_views: int,
        bunched: bool = False,
        address_agents: int = 0,
    ) -> int:
        """The signal mask of a view, given its windows (as `signals_for`)."""
        client = self.client_mask(event.user_agent, event.ip, event.ja3)
        return self.view_mask(
            client,
            event.watch_secs,
            event.video_duration_secs,
            address_minute_views,
            viewer_day_views,
            bunched,
            address_agents,
        )

    def is_flagged(self, found: list[Signal]) -> bool:
        """Whether a view with these signals is in the soft band: counted, but flagged."""
        return self.soft_score <= score(found) < self.reject_score

    def rejection_reason(self, found: list[Signal]) -> str | None:
        """The reason recorded for a rejected view (its heaviest signal), or None if it is not rejected."""
        if score(found) < self.reject_score:
            return None
        return min(found, key=lambda s: (-s.weight, REASONS.index(s.name))).name
