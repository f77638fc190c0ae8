"""What generated traffic is: the labels of its senders, its settings (`TrafficConfig`) and its
items (`Generated`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from counting import rules
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
