"""Fixtures of the counting tests: a fixed clock and a factory of valid event dicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

NOW_MS = 1_780_272_000_000  # 2026-06-01T00:00:00Z

EventFactory = Callable[..., dict[str, Any]]


def valid_event(kind: str = "view", /, **overrides: Any) -> dict[str, Any]:
    """A valid event of `kind` as the client sends it; `overrides` replace or add fields. `kind`
    is positional only, so any name (even `kind`) can be given as a field."""
    event: dict[str, Any] = {"event_id": "e-1", "type": kind, "video_id": "v0001", "ts": NOW_MS}
    if kind in ("view", "heartbeat", "leave"):
        event["session_id"] = "s-1"
    if kind in ("like", "unlike", "dislike", "undislike"):
        event["user_id"] = "u-1"
    if kind == "view":
        event["watch_secs"] = 45.0
    event.update(overrides)
    return event


@pytest.fixture(scope="session")
def make_event() -> EventFactory:
    """The factory of valid event dicts (session-scoped: hypothesis tests use it too)."""
    return valid_event


@pytest.fixture(scope="session")
def now_ms() -> int:
    return NOW_MS
