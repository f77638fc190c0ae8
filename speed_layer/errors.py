"""Errors the speed layer raises on purpose: one base class, small subclasses."""

from __future__ import annotations

from counting.errors import TallyError


class SpeedLayerError(TallyError):
    """Base class of the speed layer's errors."""


class PoisonRecord(SpeedLayerError, ValueError):
    """A broker record that cannot be decoded into stamped events; it goes to the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RebuildRefused(SpeedLayerError):
    """`tally speed rebuild` would add the log's counts to counts already in Redis."""


class EarlierCounterState(SpeedLayerError):
    """Redis holds what the earlier Redis-state counter wrote: counting on would add to its counts."""
