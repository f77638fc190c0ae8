"""Errors of the ingest API."""

from __future__ import annotations

from counting.errors import TallyError


class BrokerUnavailable(TallyError):
    """The broker did not acknowledge a write; nothing of the request is acknowledged."""


class RateLimited(TallyError):
    """Too many requests from one address or user in the sliding minute."""

    def __init__(self, scope: str, limit: int, retry_after_ms: int) -> None:
        super().__init__(
            f"more than {limit} requests a minute from this {'address' if scope == 'ip' else 'user'}: "
            f"retry after {retry_after_ms} ms"
        )
        self.scope = scope
        self.retry_after_secs = max(1, -(-retry_after_ms // 1000))
