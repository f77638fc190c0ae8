"""The write API: validates events, stamps `ingest_ts`, answers after the broker acknowledged them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import msgspec
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from redis.exceptions import RedisError

from counting.errors import InvalidEvent
from counting.event import MAX_BODY_BYTES, event_from_dict, is_valid_video_id, parse_batch
from counting.settings import Settings
from counting.version import VERSION
from ingest.auth import Unauthorized, check_key, verify_token
from ingest.connection import client_address, trusted_networks, user_agent
from ingest.errors import BrokerUnavailable, RateLimited
from ingest.publisher import Publisher, now_ms
from ingest.ratelimit import Limit, RateLimiter
from ingest.reactions import ReactionState
from ingest.routes import SINGLE_ROUTES
from ingest.schemas import ANSWERS, SINGLE_DESCRIPTION, batch_body, single_body


def _error(status: int, errors: list[dict[str, Any]], **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"errors": errors, **extra})


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise InvalidEvent("body", f"larger than {MAX_BODY_BYTES} bytes (got {declared})")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_BODY_BYTES:
            raise InvalidEvent("body", f"larger than {MAX_BODY_BYTES} bytes")
    return bytes(body)


def create_app(settings: Settings, publisher: Publisher | None = None) -> FastAPI:
    """The ingest API wired to a publisher (a real broker unless a test passes another)."""
    pub = publisher or Publisher(settings)
    redis = Redis.from_url(settings.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    reactions = ReactionState(redis)
    limiter = RateLimiter(redis)
    proxies = trusted_networks(settings.trusted_proxies)

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

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pub.start()
        yield
        await pub.stop()
        await redis.aclose()

    async def write(events: list[Any]) -> tuple[list[Any], list[str]]:
        """Publish (acks=all), then record reactions for `user_liked`; a Redis fault there is a
        warning, never a refusal: the events are already in the log."""
        written = await pub.publish(events)
        try:
            await reactions.apply(written)
        except (RedisError, OSError) as exc:
            return written, [
                f"reaction state not updated now (Redis at {settings.redis_url}: {exc}); "
                "user_liked follows once the speed layer counts the event"
            ]
        return written, []

    app = FastAPI(
        title="Tally ingest API",
        version=VERSION,
        description="Writes of views, reactions, heartbeats and leaves, answered once the broker has them.",
        lifespan=lifespan,
    )

    @app.exception_handler(InvalidEvent)
    async def _invalid(_: Request, exc: InvalidEvent) -> JSONResponse:
        status = 413 if exc.field == "body" and "larger than" in exc.reason else 422
        return _error(status, [exc.as_dict()], accepted=0)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return _error(401, [{"field": exc.field, "reason": exc.reason}], accepted=0)

    @app.exception_handler(RateLimited)
    async def _limited(_: Request, exc: RateLimited) -> JSONResponse:
        response = _error(429, [{"field": exc.scope, "reason": str(exc)}], accepted=0)
        response.headers["Retry-After"] = str(exc.retry_after_secs)
        return response

    @app.exception_handler(BrokerUnavailable)
    async def _unavailable(_: Request, exc: BrokerUnavailable) -> JSONResponse:
        return _error(503, [{"field": "broker", "reason": str(exc)}], accepted=0)

    @app.post("/v1/events", status_code=202, responses=ANSWERS, openapi_extra=batch_body())
    async def post_events(
        request: Request, x_collector_key: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        """Accept a batch `{"events": [...]}` from a trusted collector (`X-Collector-Key`); valid
        events are written even when others are refused."""
        check_key(x_collector_key, settings.collector_key, "x-collector-key")
        body = await _read_body(request)
        events, errors = parse_batch(body, now_ms())
        written, warnings = await write(events)
        content = {
            "accepted": len(written),
            "ingest_ts": written[0].ingest_ts if written else None,
            "errors": errors,
            "warnings": warnings,
        }
        return JSONResponse(status_code=422 if errors else 202, content=content)

    def _single(event_type: str) -> Any:
        async def handler(
            video_id: str, request: Request, authorization: Annotated[str | None, Header()] = None
        ) -> JSONResponse:
            user_id = verify_token(settings.user_token_secret, authorization)
            peer = request.client.host if request.client else None
            ip = client_address(peer, request.headers.getlist("x-forwarded-for"), proxies)
            await admit(ip or peer or "unknown", user_id)
            if not is_valid_video_id(video_id):
                raise InvalidEvent("video_id", f"must match [A-Za-z0-9_-]{{1,64}} (got {video_id!r})")
            body = await _read_body(request)
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

    for method, path, event_type in SINGLE_ROUTES:
        app.add_api_route(
            path,
            _single(event_type),
            methods=[method],
            status_code=202,
            responses=ANSWERS,
            openapi_extra=single_body(),
            summary=f"{method} one {event_type} event",
            description=SINGLE_DESCRIPTION,
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
