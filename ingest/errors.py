"""Errors of the ingest API."""

from __future__ import annotations

from counting.errors import TallyError


class BrokerUnavailable(TallyError):
    """The broker did not acknowledge a write; nothing of the request is acknowledged."""
