"""What the ingest API answers when it refuses a request: one status and `{"errors": [...],
"accepted": 0}` per kind of refusal, for FastAPI's exception handlers and the plain write path."""

from __future__ import annotations

from typing import Any

from counting.errors import InvalidEvent
from ingest.auth import Unauthorized
from ingest.errors import BrokerUnavailable, RateLimited

# The refusals a write can raise, each answered by `refusal`.
REFUSALS = (InvalidEvent, Unauthorized, RateLimited, BrokerUnavailable)


def refusal(exc: Exception) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, content and extra headers answering one of `REFUSALS`."""
    headers: dict[str, str] = {}
    if isinstance(exc, InvalidEvent):
        status = 413 if exc.field == "body" and "larger than" in exc.reason else 422
        errors: list[dict[str, Any]] = [exc.as_dict()]
    elif isinstance(exc, Unauthorized):
        status, errors = 401, [{"field": exc.field, "reason": exc.reason}]
    elif isinstance(exc, RateLimited):
        status, errors = 429, [{"field": exc.scope, "reason": str(exc)}]
        headers["Retry-After"] = str(exc.retry_after_secs)
    elif isinstance(exc, BrokerUnavailable):
        status, errors = 503, [{"field": "broker", "reason": str(exc)}]
    else:
        raise TypeError(f"not a refusal of the ingest API: {exc!r}")
    return status, {"errors": errors, "accepted": 0}, headers
