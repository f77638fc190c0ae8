"""The read API: wiring of the routes over the published baseline and the speed layer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from redis.asyncio import Redis

from counting import redisconn
from counting.settings import Settings
from counting.version import VERSION
from serving_layer.baselines import BaselineCache
from serving_layer.cache import ReadCache
from serving_layer.creators import creators_router
from serving_layer.errors import StoreUnavailable, UnknownCreator
from serving_layer.fast_path import STATS_PATH, PlainStats
from serving_layer.metrics import instrument
from serving_layer.milestones import milestones_router
from serving_layer.overview import overview_router
from serving_layer.routes import (
    admin_router,
    dashboard_router,
    health_router,
    live_router,
    payouts_router,
    videos_router,
)
from serving_layer.schemas import ERRORS, unavailable, unknown_creator
from serving_layer.speed import top_videos
from serving_layer.stats import REDIS_ERRORS, Answer, StatsReader, now_ms
from serving_layer.trends import trends_router

STATIC = Path(__file__).parent / "static"
HOT_VIDEOS_EVERY_S = 5.0


async def _refresh_hot_videos(
    settings: Settings, redis: Redis, reader: StatsReader, stop: asyncio.Event
) -> None:
    """Trending videos get a tighter staleness bound: refresh the set every few seconds, until `stop`.

    The loop ends on `stop` as well as on cancellation: a cancel that meets the Redis client's own
    socket timeout can come out of redis-py as its TimeoutError, which the loop survives, and a loop
    that only ends when cancelled would then hold the app's shutdown for ever (seen in CI)."""
    while not stop.is_set():
        bucket = now_ms() // settings.bucket_ms
        with suppress(*REDIS_ERRORS):
            top = await top_videos(redis, bucket - 1, bucket, 50)
            reader.hot_videos = frozenset(v for v, _ in top)
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HOT_VIDEOS_EVERY_S)


def _lifespan(
    settings: Settings, redis: Redis, reader: StatsReader
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Refresh the hot videos while the app runs; close Redis at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        refresher = asyncio.create_task(_refresh_hot_videos(settings, redis, reader, stop))
        yield
        stop.set()
        refresher.cancel()
        with suppress(asyncio.CancelledError):
            await refresher
        await redis.aclose()

    return lifespan


def _handle_errors(app: FastAPI) -> None:
    """Invalid requests answer 422 with one entry per field; an unreachable store answers 503; a
    creator not in the catalog answers 404."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": str(e["loc"][-1]), "reason": e["msg"], "value": e.get("input")} for e in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"errors": errors})

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Any, exc: StoreUnavailable) -> JSONResponse:
        return unavailable(exc)

    @app.exception_handler(UnknownCreator)
    async def _unknown_creator(_: Any, exc: UnknownCreator) -> JSONResponse:
        return unknown_creator(exc)


def create_app(settings: Settings) -> FastAPI:
    """The serving API over the configured Redis and the published baseline."""
    redis = redisconn.async_client(settings, socket_timeout=1.0, socket_connect_timeout=1.0)
    baselines = BaselineCache(settings.baselines_dir, settings.batch_dir)
    bound = settings.serving_cache_ms / 1000
    reader = StatsReader(settings, redis, baselines, ReadCache[Answer](), bound, bound / 4)

    app = FastAPI(
        title="Tally serving API",
        version=VERSION,
        description="Views, likes and unique viewers: the batch baseline plus the speed layer's deltas.",
        lifespan=_lifespan(settings, redis, reader),
        responses=ERRORS,
    )
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _handle_errors(app)

    app.include_router(trends_router(settings, redis))
    app.include_router(creators_router(settings, redis, baselines))
    app.include_router(milestones_router(settings))
    app.include_router(overview_router(settings, redis, baselines, reader))
    app.include_router(videos_router(settings, redis, baselines, reader))
    app.include_router(payouts_router(settings))
    app.include_router(admin_router(settings, reader))
    app.include_router(live_router(reader))
    app.include_router(dashboard_router(STATIC))
    app.include_router(health_router(redis, baselines))

    stats_route = next(r for r in app.routes if isinstance(r, APIRoute) and r.path == STATS_PATH)
    app.add_middleware(PlainStats, reader=reader, route=stats_route)
    instrument(app)  # added last, so outermost: it times the plain stats reads too
    return app
