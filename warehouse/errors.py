"""Errors of the warehouse package."""

from __future__ import annotations

from counting.errors import TallyError


class BaselineError(TallyError):
    """A baseline could not be published or read."""
