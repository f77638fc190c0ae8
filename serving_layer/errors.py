"""Errors of the serving layer."""

from __future__ import annotations

from counting.errors import TallyError


class StoreUnavailable(TallyError):
    """Neither the speed store nor a baseline can answer."""
