"""The domain of Tally: events, the counting rules, the oracle, settings and the Redis key layout."""

from __future__ import annotations

from counting.errors import InvalidEvent, InvalidSetting, TallyError
from counting.event import Event, parse_batch, parse_event, stamped
from counting.oracle import VideoCounts, count
from counting.rules import RULES_VERSION, bucket_of, viewer_of
from counting.settings import Settings

__all__ = [
    "RULES_VERSION",
    "Event",
    "InvalidEvent",
    "InvalidSetting",
    "Settings",
    "TallyError",
    "VideoCounts",
    "bucket_of",
    "count",
    "parse_batch",
    "parse_event",
    "stamped",
    "viewer_of",
]
