"""The write API: validates events, stamps `ingest_ts`, answers after the broker acknowledged them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.asyncio import Redis

from counting import redisconn
from counting.errors import InvalidEvent
from counting.settings import Settings
from counting.version import VERSION
from ingest.auth import Unauthorized
from ingest.connection import trusted_networks
from ingest.errors import BrokerUnavailable, RateLimited
from ingest.publisher import Publisher
from ingest.ratelimit import RateLimiter
from ingest.reactions import ReactionState
from ingest.routers import Writer, batch_router, health_router, single_router


def _error(status: int, errors: list[dict[str, Any]], **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"errors": errors, **extra})


def _lifespan(pub: Publisher, redis: Redis) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the publisher while the app runs; stop it and close Redis at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pub.start()
        yield
        await pub.stop()
        await redis.aclose()

    return lifespan


def _handle_errors(app: FastAPI) -> None:
    """Each refusal answers its status with `{"errors": [...], "accepted": 0}`."""

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


def create_app(settings: Settings, publisher: Publisher | None = None) -> FastAPI:
    """The ingest API wired to a publisher (a real broker unless a test passes another)."""
    pub = publisher or Publisher(settings)
    redis = redisconn.async_client(settings, socket_timeout=1.0, socket_connect_timeout=1.0)
    write = Writer(pub, ReactionState(redis), settings.redis_url)
    limiter = RateLimiter(redis)
    proxies = trusted_networks(settings.trusted_proxies)

    app = FastAPI(
        title="Tally ingest API",
        version=VERSION,
        description="Writes of views, reactions, heartbeats and leaves, answered once the broker has them.",
        lifespan=_lifespan(pub, redis),
    )
    _handle_errors(app)

    app.include_router(batch_router(settings, write))
    app.include_router(single_router(settings, limiter, proxies, write))
    app.include_router(health_router())
    return app
