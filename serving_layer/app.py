"""The read API: wiring of the routes over the published baseline and the speed layer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import date
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from redis.asyncio import Redis

from counting import rules
from counting.event import VIDEO_ID_PATTERN
from counting.settings import Settings
from counting.version import VERSION
from serving_layer.admin import event_verdict, is_admin, logged_event, raw_events, video_explanations
from serving_layer.baselines import BaselineCache
from serving_layer.cache import ReadCache
from serving_layer.creators import creators_router
from serving_layer.errors import StoreUnavailable
from serving_layer.fast_path import STATS_PATH, PlainStats
from serving_layer.live import live_stream
from serving_layer.metrics import instrument
from serving_layer.milestones import milestones_router
from serving_layer.overview import overview_router
from serving_layer.payouts import creator_payouts
from serving_layer.schemas import ERRORS, CreatorPayouts, ErrorAnswer, error_answer, unavailable
from serving_layer.speed import top_videos
from serving_layer.stats import REDIS_ERRORS, Answer, StatsReader, encode_json, now_ms
from serving_layer.timeseries import DEFAULT_BUCKETS, MAX_BUCKETS, Refused, Step, Window, series_answer
from serving_layer.trends import trends_router

STATIC = FilePath(__file__).parent / "static"
VideoIdPath = Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the video id")]
EventIdPath = Annotated[str, Path(min_length=1, max_length=64, description="the event id the client sent")]
UserIdQuery = Annotated[str | None, Query(min_length=1, max_length=64, description="the asking user")]


def _json(content: bytes) -> Response:
    """JSON text already encoded, answered as FastAPI answers a returned dict."""
    return Response(content, media_type="application/json")


def create_app(settings: Settings) -> FastAPI:
    """The serving API over the configured Redis and the published baseline."""
    redis = Redis.from_url(settings.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    baselines = BaselineCache(settings.baselines_dir, settings.batch_dir)
    bound = settings.serving_cache_ms / 1000
    reader = StatsReader(settings, redis, baselines, ReadCache[Answer](), bound, bound / 4)

    async def refresh_hot_videos() -> None:
        """Trending videos get a tighter staleness bound: refresh the set every few seconds."""
        while True:
            bucket = now_ms() // settings.bucket_ms
            with suppress(*REDIS_ERRORS):
                top = await top_videos(redis, bucket - 1, bucket, 50)
                reader.hot_videos = frozenset(v for v, _ in top)
            await asyncio.sleep(5)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        refresher = asyncio.create_task(refresh_hot_videos())
        yield
        refresher.cancel()
        with suppress(asyncio.CancelledError):
            await refresher
        await redis.aclose()

    app = FastAPI(
        title="Tally serving API",
        version=VERSION,
        description="Views, likes and unique viewers: the batch baseline plus the speed layer's deltas.",
        lifespan=lifespan,
        responses=ERRORS,
    )
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": str(e["loc"][-1]), "reason": e["msg"], "value": e.get("input")} for e in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"errors": errors})

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Any, exc: StoreUnavailable) -> JSONResponse:
        return unavailable(exc)

    app.include_router(trends_router(settings, redis))
    app.include_router(creators_router(settings, redis, baselines))
    app.include_router(milestones_router(settings))
    app.include_router(overview_router(settings, redis, baselines))

    @app.get(STATS_PATH, response_model=dict[str, Any])
    async def stats(video_id: VideoIdPath, user_id: UserIdQuery = None) -> Response:
        """Views, likes, dislikes, unique viewers and presence: baseline(C) + speed buckets >= C."""
        answer = await reader.answer(video_id)
        if user_id is None:
            return _json(answer.encoded)
        body = dict(answer.body)
        reaction, doubt = await reader.user_reaction(video_id, user_id)
        body["user_liked"] = None if reaction is None else reaction == rules.LIKED
        body["user_disliked"] = None if reaction is None else reaction == rules.DISLIKED
        if doubt is not None:
            body["degraded"] = [*body["degraded"], doubt]
            body["approx"] = True
        return _json(encode_json(body))

    @app.get("/v1/videos/{video_id}/timeseries")
    async def timeseries(
        video_id: VideoIdPath,
        start: Annotated[int | None, Query(ge=0, description="range start, ms (inclusive)")] = None,
        end: Annotated[int | None, Query(ge=0, description="range end, ms (exclusive)")] = None,
        buckets: Annotated[
            int | None,
            Query(
                ge=1,
                le=MAX_BUCKETS,
                description=f"how many buckets (steps, with `step`): from `start` on, or up to `end` "
                f"(default: now); alone, the last N (default {DEFAULT_BUCKETS})",
            ),
        ] = None,
        step: Annotated[
            Step | None,
            Query(
                description="a history tier: 1m or 1h points (each within its retention, "
                "TALLY_HISTORY_MINUTE_RETENTION_MS / TALLY_HISTORY_HOUR_RETENTION_MS); "
                "default: one point per speed bucket"
            ),
        ] = None,
    ) -> Any:
        """Counted and refused views per bucket, or per step of a history tier: batch points before
        the cutoff, speed after; each point has its `start_ms` and `width_ms`."""
        window = Window(start, end, buckets)
        answer = await series_answer(redis, baselines, settings, video_id, window, step, now_ms())
        if isinstance(answer, Refused):
            return error_answer(422, answer.field, answer.reason)
        return answer

    @app.get("/v1/creators/{creator_id}/payouts", response_model=CreatorPayouts)
    async def payouts(
        creator_id: Annotated[
            str, Path(pattern=VIDEO_ID_PATTERN, description="the creator id ([A-Za-z0-9_-]{1,64})")
        ],
        since: Annotated[date | None, Query(alias="from", description="first UTC day, YYYY-MM-DD")] = None,
        until: Annotated[date | None, Query(alias="to", description="last UTC day, YYYY-MM-DD")] = None,
        history: Annotated[
            bool, Query(description="every run's rows of each day, each marked current or not")
        ] = False,
    ) -> Any:
        """The creator's payout for each day: the current ledger row (the latest published run's)
        with its views, rate, amount, and the run, rules version, input files (count and digest)
        and counted-id digest that `tally audit payout` re-derives it from; `history=true` answers
        every run's rows, marked `current` or not."""
        if since is not None and until is not None and until < since:
            return error_answer(422, "to", f"must not be before 'from' (got from={since}, to={until})")
        rows = await asyncio.to_thread(creator_payouts, settings.store_url, creator_id, since, until, history)
        return {"creator_id": creator_id, "history": history, "payouts": rows}

    @app.get("/v1/admin/videos/{video_id}/raw")
    async def admin_raw(
        video_id: VideoIdPath,
        limit: Annotated[int, Query(ge=0, le=1_000)] = 50,
        x_admin_key: Annotated[str | None, Header()] = None,
    ) -> Any:
        """The video's events in the raw log and its refused views by reason (admin key required)."""
        if not is_admin(x_admin_key, settings.admin_key):
            return error_answer(401, "x-admin-key", "missing or wrong admin key")
        raw = await asyncio.to_thread(raw_events, settings.raw_dir, video_id, limit)
        counts = await reader.stats(video_id)
        baseline = reader.baselines.get()
        explained = await asyncio.to_thread(video_explanations, settings.batch_dir, baseline, video_id, limit)
        return {"video_id": video_id, "rejected": counts["rejected"], **explained, **raw}

    @app.get(
        "/v1/admin/events/{event_id}",
        responses={404: {"model": ErrorAnswer, "description": "the Parquet log does not hold the event"}},
    )
    async def admin_event(event_id: EventIdPath, x_admin_key: Annotated[str | None, Header()] = None) -> Any:
        """Why the served batch run refused, flagged or accepted one logged event: its verdict,
        score and the signals that fired, with the event's first copy (admin key required)."""
        if not is_admin(x_admin_key, settings.admin_key):
            return error_answer(401, "x-admin-key", "missing or wrong admin key")
        event, copies = await asyncio.to_thread(logged_event, settings.raw_dir, event_id)
        if event is None:
            reason = (
                f"{event_id!r} is not in the Parquet log: the archiver writes accepted events there "
                "within a minute or two of the ingest accepting them; check the id, or try again"
            )
            return error_answer(404, "event_id", reason)
        baseline = reader.baselines.get()
        verdict = await asyncio.to_thread(event_verdict, settings.batch_dir, baseline, event)
        return {"event_id": event_id, "copies_in_log": copies, **verdict, "event": event}

    @app.get("/v1/videos/{video_id}/live")
    async def live(video_id: VideoIdPath, request: Request) -> StreamingResponse:
        """Server-sent events: an `stats` event whenever the counts change."""
        stream = live_stream(lambda: reader.stats(video_id), request.is_disconnected)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(STATIC / "dashboard.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Readiness: Redis answers or a baseline is published (something can be served); `process`:
        the id of the process that answered (several may share the port)."""
        redis_ok = True
        try:
            await redis.ping()
        except REDIS_ERRORS:
            redis_ok = False
        baseline = baselines.get()
        ready = redis_ok or baseline is not None
        body = {
            "ready": ready,
            "redis": redis_ok,
            "baseline_run_id": baseline.run_id if baseline else None,
            "process": os.getpid(),
        }
        return JSONResponse(status_code=200 if ready else 503, content=body)

    stats_route = next(r for r in app.routes if isinstance(r, APIRoute) and r.path == STATS_PATH)
    app.add_middleware(PlainStats, reader=reader, route=stats_route)
    instrument(app)  # added last, so outermost: it times the plain stats reads too
    return app
