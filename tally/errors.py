"""Errors of the command line and the local stack."""

from __future__ import annotations

from counting.errors import TallyError


class StackError(TallyError):
    """A part of the local stack could not be started or reached."""
