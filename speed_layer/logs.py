"""Structured log lines: `event=name key=value ...`, one line per fact, for the workers."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("tally.speed_layer")


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def kv(event: str, **fields: Any) -> str:
    """One log line: `event=<event>` then the fields as key=value, values quoted when needed."""
    parts = [f"event={_format(event)}"]
    parts.extend(f"{key}={_format(value)}" for key, value in fields.items())
    return " ".join(parts)


def info(event: str, **fields: Any) -> None:
    logger.info(kv(event, **fields))


def warning(event: str, **fields: Any) -> None:
    logger.warning(kv(event, **fields))


def error(event: str, **fields: Any) -> None:
    logger.error(kv(event, **fields))
