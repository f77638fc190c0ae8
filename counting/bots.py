"""Bot scoring: eleven weighted signals (`counting.signals`), their thresholds, weights and ranges
read from a rules file (`counting.botrules`), and the score that rejects. `BotFilter`
(`counting.botfilter`) is one version of the rules made ready for the hot paths; every layer uses the
filter of its settings (`filter_of`, `RulesInUse`), `shipped()` is the filter of the shipped rules."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from counting.botfilter import BotFilter
from counting.botrules import DEFAULT_RULES_FILE, RulesError, load_rules, shipped_rules
from counting.logs import Log
from counting.signals import (
    ADDRESS_VELOCITY,
    AGENT_ROTATION,
    ALLOWED_BIT,
    BAD_TLS,
    BIT,
    DATACENTER_IP,
    IMPOSSIBLE_AGENT,
    MASK_ORDER,
    MISSING_AGENT,
    REASONS,
    REPLAY_RATE,
    SCRIPTED_AGENT,
    THRESHOLD_BUNCHING,
    WATCH_ANOMALY,
    WATCH_RATIO,
    Signal,
    score,
)

# The signals' names and the filter stay importable from here, where the other layers import them.
__all__ = [
    "ADDRESS_VELOCITY",
    "AGENT_ROTATION",
    "ALLOWED_BIT",
    "BAD_TLS",
    "BIT",
    "DATACENTER_IP",
    "IMPOSSIBLE_AGENT",
    "MASK_ORDER",
    "MISSING_AGENT",
    "REASONS",
    "REPLAY_RATE",
    "SCRIPTED_AGENT",
    "THRESHOLD_BUNCHING",
    "WATCH_ANOMALY",
    "WATCH_RATIO",
    "BotFilter",
    "RulesError",
    "RulesInUse",
    "Signal",
    "filter_of",
    "score",
    "shipped",
]
log = Log(__name__)


@lru_cache(maxsize=8)
def _filter(path: Path, mtime_ns: int, size: int) -> BotFilter:
    if path == DEFAULT_RULES_FILE:
        return BotFilter(shipped_rules())
    return BotFilter(load_rules(path))


def filter_of(path: Path | None) -> BotFilter:
    """The filter of the rules file at `path` (None: the rules shipped with Tally), read again when
    the file changes; raises `RulesError` for a file that does not pass the check."""
    path = DEFAULT_RULES_FILE if path is None else path
    try:
        stat = path.stat()
    except OSError:
        return BotFilter(load_rules(path))  # raises the RulesError that says why
    return _filter(path, stat.st_mtime_ns, stat.st_size)


def shipped() -> BotFilter:
    """The filter of the rules shipped with Tally (read on first use: importing reads no file)."""
    return filter_of(None)


def __getattr__(name: str) -> BotFilter:
    """`bots.SHIPPED`: the shipped rules' filter, for code that generates or describes traffic."""
    if name == "SHIPPED":
        return shipped()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RulesInUse:
    """The rules of a file that operators may edit while a worker runs: read again when the file
    changes; a changed file that does not pass the check is logged and the rules in use keep
    running. A file that does not pass when the worker starts raises `RulesError`."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self.filter = filter_of(path)
        self._refused: str | None = None

    def current(self) -> BotFilter:
        try:
            found = filter_of(self._path)
        except RulesError as exc:
            if str(exc) != self._refused:
                self._refused = str(exc)
                log.error(
                    "bot_rules_refused",
                    error=exc,
                    still_counting_with=self.filter.version,
                    hint="fix the file, check it with 'tally rules check'",
                )
            return self.filter
        if found is not self.filter and found.rules != self.filter.rules:
            log.warning("bot_rules_changed", was=self.filter.version, now=found.version)
            self.filter = found
        self._refused = None
        return self.filter
