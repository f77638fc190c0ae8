"""The read API: per-video stats merged from the batch baseline and the speed layer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from redis.exceptions import RedisError

from counting import rules
from counting.event import VIDEO_ID_PATTERN
from counting.settings import Settings
from serving_layer.baselines import BaselineCache
from serving_layer.merge import merge
from serving_layer.speed import SpeedCounts, read_reaction, read_speed

VideoIdPath = Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the video id")]
UserIdQuery = Annotated[str | None, Query(min_length=1, max_length=64)]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def create_app(settings: Settings) -> FastAPI:
    """The serving API over the configured Redis and the published baseline."""
    baselines = BaselineCache(settings.baselines_dir)
    redis = Redis.from_url(settings.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await redis.aclose()

    app = FastAPI(title="Tally serving API", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": str(e["loc"][-1]), "reason": e["msg"], "value": e.get("input")} for e in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"errors": errors})

    @app.get("/v1/videos/{video_id}/stats")
    async def stats(video_id: VideoIdPath, user_id: UserIdQuery = None) -> JSONResponse:
        """Views, likes, dislikes, unique viewers and presence: baseline(C) + speed buckets >= C."""
        now = _now_ms()
        baseline = baselines.get()
        cutoff = baseline.cutoff if baseline else 0
        from_bucket = rules.bucket_of(cutoff, settings.bucket_ms)
        speed: SpeedCounts | None = None
        reaction: str | None = None
        degraded: list[str] = []
        try:
            speed = await read_speed(redis, video_id, from_bucket, now)
            if user_id is not None:
                reaction = await read_reaction(redis, video_id, user_id)
        except (RedisError, OSError) as exc:
            if baseline is None:
                return JSONResponse(
                    status_code=503,
                    content={
                        "errors": [
                            {
                                "field": "redis",
                                "reason": f"Redis is not reachable at {settings.redis_url} and no batch "
                                f"baseline is published: start Redis ('tally up') or run a batch ({exc})",
                            }
                        ]
                    },
                )
            degraded.append("speed layer unreachable: counts are the batch baseline only")
        if baseline is not None and now - baseline.cutoff > settings.retention_ms:
            degraded.append("baseline older than the speed retention: recent counts may be missing")
        merged = merge(video_id, baseline.get(video_id) if baseline else None, speed)
        body: dict[str, Any] = {
            "video_id": video_id,
            "views": merged.views,
            "likes": merged.likes,
            "dislikes": merged.dislikes,
            "unique_viewers": merged.unique_viewers,
            "watching_now": merged.watching_now,
            "rejected": merged.rejected,
            "as_of": now,
            "batch_cutoff": baseline.cutoff if baseline else None,
            "batch_run_id": baseline.run_id if baseline else None,
            "rules_version": baseline.rules_version if baseline else rules.RULES_VERSION,
            "approx": bool(degraded),
            "degraded": degraded,
        }
        if user_id is not None:
            body["user_liked"] = reaction == rules.LIKED if reaction is not None else None
            body["user_disliked"] = reaction == rules.DISLIKED if reaction is not None else None
        return JSONResponse(content=body)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
