"""Who may write: trusted collectors by key, users by a signed token whose user id is the only one
their events may carry."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from counting.errors import TallyError

TOKEN_VERSION = "v1"


class Unauthorized(TallyError):
    """A request without valid credentials; `field` names the header."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def issue_token(secret: str, user_id: str, ttl_secs: int, now: float | None = None) -> str:
    """A token `v1.<user>.<expiry>.<hmac>` that proves `user_id` until it expires."""
    expires = int((now if now is not None else time.time()) + ttl_secs)
    payload = f"{TOKEN_VERSION}.{_b64(user_id.encode())}.{expires}"
    return f"{payload}.{_signature(secret, payload)}"


def verify_token(secret: str, header: str | None, now: float | None = None) -> str:
    """The user id of a valid `Authorization: Bearer <token>`; Unauthorized otherwise (always, when
    no secret is configured: a token signed with an empty key proves nothing)."""
    if not secret:
        raise Unauthorized("authorization", "this server has no user token secret configured")
    if not header:
        raise Unauthorized(
            "authorization", "a signed user token is required: 'Authorization: Bearer <token>'"
        )
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("authorization", "expected 'Bearer <token>'")
    parts = token.strip().split(".")
    if len(parts) != 4 or parts[0] != TOKEN_VERSION:
        raise Unauthorized("authorization", "malformed token")
    payload = ".".join(parts[:3])
    # Compared as bytes: a header may carry any character, and compare_digest refuses non-ASCII text.
    given = parts[3].encode()
    if not hmac.compare_digest(given, _signature(secret, payload).encode()):
        raise Unauthorized("authorization", "bad token signature")
    if not parts[2].isdigit() or int(parts[2]) < (now if now is not None else time.time()):
        raise Unauthorized("authorization", "token expired: ask for a new one")
    try:
        user_id = _unb64(parts[1]).decode()
    except (ValueError, UnicodeDecodeError):
        raise Unauthorized("authorization", "malformed token") from None
    if not 1 <= len(user_id) <= 64:
        raise Unauthorized("authorization", "malformed token")
    return user_id


def check_key(given: str | None, expected: str, header: str) -> None:
    """Constant-time check of a shared key presented in `header`; an empty `expected` admits no one."""
    if not expected or given is None or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Unauthorized(header, "missing or wrong key")
