"""The user routes: one view, reaction, heartbeat or leave of a video, from a signed user token
(the routes and their event types: `ingest.routes.SINGLE_ROUTES`)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from counting.errors import InvalidEvent
from counting.event import event_from_dict, is_valid_video_id
from counting.settings import Settings
from ingest.auth import verify_token
from ingest.connection import IPNetwork, client_address, user_agent
from ingest.errors import RateLimited
from ingest.publisher import now_ms
from ingest.ratelimit import Limit, RateLimiter
from ingest.routers.intake import Writer, read_body
from ingest.routes import SINGLE_ROUTES
from ingest.schemas import ANSWERS, SINGLE_DESCRIPTION, single_body

Admit = Callable[[str, str], Awaitable[None]]


def _admission(settings: Settings, limiter: RateLimiter) -> Admit:
    """The check each user route makes before anything else but the token."""

    async def admit(address: str, user_id: str) -> None:
        """Per-address and per-user sliding-minute limits of the user routes, in one round trip."""
        refused = await limiter.refusal(
            (
                Limit("ip", address, settings.rate_limit_ip_per_min),
                Limit("user", user_id, settings.rate_limit_user_per_min),
            )
        )
        if refused is not None:
            raise RateLimited(refused.scope, refused.limit, refused.retry_after_ms)

    return admit


async def _body_fields(request: Request) -> dict[str, Any]:
    """The body's JSON object, refused when it sets a field the route, token or connection sets."""
    body = await read_body(request)
    try:
        data = msgspec.json.decode(body) if body else {}
    except msgspec.DecodeError as exc:
        raise InvalidEvent("body", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidEvent("body", f"must be a JSON object (got {type(data).__name__})")
    for field in ("type", "video_id"):
        if field in data:
            raise InvalidEvent(field, "set by the route; leave it out of the body")
    if "user_id" in data:
        raise InvalidEvent("user_id", "comes from the signed token; leave it out of the body")
    for field in ("ip", "user_agent"):
        if field in data:
            raise InvalidEvent(field, "set from the connection; leave it out of the body")
    return data


def _single(
    event_type: str, settings: Settings, admit: Admit, proxies: tuple[IPNetwork, ...], write: Writer
) -> Any:
    """The handler of the route writing `event_type` (named `handler`: the operation ids say so)."""

    async def handler(request: Request) -> JSONResponse:
        # The path's video and the Authorization header read here, not declared as parameters:
        # FastAPI's solving of declared ones took 13 % of the ingest process's CPU at 800 likes/s
        # (py-spy). `schemas.single_body` documents them.
        video_id = request.path_params["video_id"]
        user_id = verify_token(settings.user_token_secret, request.headers.get("authorization"))
        peer = request.client.host if request.client else None
        ip = client_address(peer, request.headers.getlist("x-forwarded-for"), proxies)
        await admit(ip or peer or "unknown", user_id)
        if not is_valid_video_id(video_id):
            raise InvalidEvent("video_id", f"must match [A-Za-z0-9_-]{{1,64}} (got {video_id!r})")
        data = await _body_fields(request)
        now = now_ms()
        fields = {
            # Supplied by the server when the body leaves them out; the answer returns both, so a
            # retry can send the same event_id.
            "event_id": uuid.uuid4().hex,
            "ts": now,
            **data,
            "type": event_type,
            "video_id": video_id,
            "user_id": user_id,
            "ip": ip,
            "user_agent": user_agent(request.headers),
        }
        event = event_from_dict(fields, now)
        written, warnings = await write([event])
        content = {
            "accepted": 1,
            "ingest_ts": written[0].ingest_ts,
            "event_id": event.event_id,
            "ts": event.ts,
            "warnings": warnings,
        }
        return JSONResponse(status_code=202, content=content)

    return handler


def single_router(
    settings: Settings, limiter: RateLimiter, proxies: tuple[IPNetwork, ...], write: Writer
) -> APIRouter:
    """One route per entry of `SINGLE_ROUTES`, rate limited per client address and per user."""
    router = APIRouter()
    admit = _admission(settings, limiter)
    for method, path, event_type in SINGLE_ROUTES:
        router.add_api_route(
            path,
            _single(event_type, settings, admit, proxies, write),
            methods=[method],
            status_code=202,
            responses=ANSWERS,
            openapi_extra=single_body(event_type),
            summary=f"{method} one {event_type} event",
            description=SINGLE_DESCRIPTION,
        )
    return router
