"""The bot signals: their names (the rejection reasons), the order that breaks ties between them
(`REASONS`), their bits in a signal mask (`MASK_ORDER`, `BIT`) and the score of a set of them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    """One bot signal: its name (the rejection reason) and its weight in the score."""

    name: str
    weight: float


# The signals, by name (what a rejection records); their weights come from the rules.
SCRIPTED_AGENT = "scripted_agent"
ADDRESS_VELOCITY = "address_velocity"
REPLAY_RATE = "replay_rate"
DATACENTER_IP = "datacenter_ip"
BAD_TLS = "bad_ja3"
WATCH_ANOMALY = "watch_anomaly"
WATCH_RATIO = "watch_ratio"
THRESHOLD_BUNCHING = "threshold_bunching"
MISSING_AGENT = "missing_agent"
IMPOSSIBLE_AGENT = "impossible_agent"
AGENT_ROTATION = "agent_rotation"
# The order of the signals: ties between equally heavy signals go to the first (the reason). A new
# signal goes at the end: the speed layer's markers keep a verdict as its place here
# (`speed_layer/counter/judge.py`, VERDICTS).
REASONS: tuple[str, ...] = (
    SCRIPTED_AGENT,
    ADDRESS_VELOCITY,
    REPLAY_RATE,
    DATACENTER_IP,
    BAD_TLS,
    WATCH_ANOMALY,
    WATCH_RATIO,
    THRESHOLD_BUNCHING,
    MISSING_AGENT,
    IMPOSSIBLE_AGENT,
    AGENT_ROTATION,
)
# Bit i of a signal mask is signal i of MASK_ORDER. Properties of the client alone: the agent's
# (scripted, missing, impossible), the address's and the TLS fingerprint's; of the view alone: the
# watch time's (anomaly, ratio); the others need windows (velocity, replays, bunching, rotation).
MASK_ORDER: tuple[str, ...] = (
    SCRIPTED_AGENT,
    DATACENTER_IP,
    BAD_TLS,
    WATCH_ANOMALY,
    ADDRESS_VELOCITY,
    REPLAY_RATE,
    WATCH_RATIO,
    THRESHOLD_BUNCHING,
    MISSING_AGENT,
    IMPOSSIBLE_AGENT,
    AGENT_ROTATION,
)
BIT: dict[str, int] = {name: 1 << i for i, name in enumerate(MASK_ORDER)}
# Not a signal: the client's address is on the allow-list, so no address signal fires for it.
ALLOWED_BIT = 1 << len(MASK_ORDER)


def score(found: list[Signal]) -> float:
    """The score of a view with these signals: the sum of their weights."""
    return sum(s.weight for s in found)
