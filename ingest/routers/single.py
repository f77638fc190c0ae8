"""The user routes: one view, reaction, heartbeat or leave of a video, from a signed user token
(the routes and their event types: `ingest.routes.SINGLE_ROUTES`)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

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


def _body_fields(body: bytes) -> dict[str, Any]:
    """The body's JSON object, refused when it sets a field the route, token or connection sets."""
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


@dataclass(frozen=True)
class SingleWrites:
    """What a user route does, from what its request carries to its answer's content (202): the
    token, the rate limits, the video id, the body, then the write. Raises one of
    `ingest.refusals.REFUSALS` when it refuses. FastAPI's routes and the plain write path
    (`ingest.fast_path`) both answer through it."""

    settings: Settings
    admit: Admit
    proxies: tuple[IPNetwork, ...]
    write: Writer

    async def __call__(
        self,
        event_type: str,
        video_id: str,
        headers: Headers,
        peer: str | None,
        body: Callable[[], Awaitable[bytes]],
    ) -> dict[str, Any]:
        """The answer's content of a write of `event_type` on `video_id`; `body` reads the request's
        body (after the checks that need none)."""
        user_id = verify_token(self.settings.user_token_secret, headers.get("authorization"))
        ip = client_address(peer, headers.getlist("x-forwarded-for"), self.proxies)
        await self.admit(ip or peer or "unknown", user_id)
        if not is_valid_video_id(video_id):
            raise InvalidEvent("video_id", f"must match [A-Za-z0-9_-]{{1,64}} (got {video_id!r})")
        data = _body_fields(await body())
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
            "user_agent": user_agent(headers),
        }
        event = event_from_dict(fields, now)
        written, warnings = await self.write([event])
        return {
            "accepted": 1,
            "ingest_ts": written[0].ingest_ts,
            "event_id": event.event_id,
            "ts": event.ts,
            "warnings": warnings,
        }


def single_writes(
    settings: Settings, limiter: RateLimiter, proxies: tuple[IPNetwork, ...], write: Writer
) -> SingleWrites:
    """The user routes' writes, rate limited per client address and per user."""
    return SingleWrites(settings, _admission(settings, limiter), proxies, write)


def _single(event_type: str, writes: SingleWrites) -> Any:
    """The FastAPI handler of the route writing `event_type` (named `handler`: the operation ids
    say so). The plain write path answers these requests first (`ingest.fast_path`)."""

    async def handler(request: Request) -> JSONResponse:
        # The path's video and the Authorization header read here, not declared as parameters:
        # `schemas.single_body` documents them.
        peer = request.client.host if request.client else None
        content = await writes(
            event_type, request.path_params["video_id"], request.headers, peer, lambda: read_body(request)
        )
        return JSONResponse(status_code=202, content=content)

    return handler


def single_router(writes: SingleWrites) -> APIRouter:
    """One route per entry of `SINGLE_ROUTES`, each answered by `writes`."""
    router = APIRouter()
    for method, path, event_type in SINGLE_ROUTES:
        router.add_api_route(
            path,
            _single(event_type, writes),
            methods=[method],
            status_code=202,
            responses=ANSWERS,
            openapi_extra=single_body(event_type),
            summary=f"{method} one {event_type} event",
            description=SINGLE_DESCRIPTION,
        )
    return router
