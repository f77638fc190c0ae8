"""The write API: validates events, stamps `ingest_ts`, answers after the broker acknowledged them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.asyncio import Redis

from counting import redisconn
from counting.settings import Settings
from counting.version import VERSION
from ingest.connection import trusted_networks
from ingest.fast_path import PlainWrites
from ingest.publisher import Publisher
from ingest.ratelimit import RateLimiter
from ingest.reactions import ReactionState
from ingest.refusals import REFUSALS, refusal
from ingest.routers import Writer, batch_router, health_router, single_router, single_writes


def _handle_errors(app: FastAPI) -> None:
    """Each refusal answers as `ingest.refusals.refusal` says."""

    async def _refused(_: Request, exc: Exception) -> JSONResponse:
        status, content, headers = refusal(exc)
        return JSONResponse(status_code=status, content=content, headers=headers)

    for kind in REFUSALS:
        app.add_exception_handler(kind, _refused)


def _lifespan(pub: Publisher, redis: Redis) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the publisher while the app runs; stop it and close Redis at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pub.start()
        yield
        await pub.stop()
        await redis.aclose()

    return lifespan


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
    writes = single_writes(settings, limiter, proxies, write)
    app.include_router(single_router(writes))
    app.include_router(health_router())
    app.add_middleware(PlainWrites, writes=writes)
    return app
