"""Errors raised by the counting domain: one base class, small subclasses."""

from __future__ import annotations

from pathlib import Path


class TallyError(Exception):
    """Base class of every error Tally raises on purpose."""


class InvalidEvent(TallyError, ValueError):
    """An event broke a field rule; `field` names the field and `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class FileError(TallyError, ValueError):
    """A file that cannot be used: its `path`, the `line` (0: the whole file) and the `reason`."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class InvalidSetting(TallyError, ValueError):
    """A setting holds a value the platform cannot run with."""
