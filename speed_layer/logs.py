"""The speed layer's structured log (`counting/logs.py`: one line per fact, key=value)."""

from __future__ import annotations

from counting.logs import Log, kv

_log = Log("tally.speed_layer")
logger = _log.logger
info = _log.info
warning = _log.warning
error = _log.error

__all__ = ["error", "info", "kv", "logger", "warning"]
