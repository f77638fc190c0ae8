"""The video routes: a video's merged counts and its counts per bucket or history step."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from redis.asyncio import Redis

from counting import rules
from counting.settings import Settings
from serving_layer.baselines import BaselineCache
from serving_layer.fast_path import STATS_PATH
from serving_layer.routes.params import UserIdQuery, VideoIdPath
from serving_layer.schemas import StatsAnswer, error_answer
from serving_layer.stats import StatsReader, encode_json, now_ms
from serving_layer.timeseries import DEFAULT_BUCKETS, MAX_BUCKETS, Refused, Step, Window, series_answer


def _json(content: bytes) -> Response:
    """JSON text already encoded, answered as FastAPI answers a returned dict."""
    return Response(content, media_type="application/json")


def videos_router(
    settings: Settings, redis: Redis, baselines: BaselineCache, reader: StatsReader
) -> APIRouter:
    """`stats` (also answered by `fast_path.PlainStats` when plain) and `timeseries` of a video."""
    router = APIRouter()

    @router.get(STATS_PATH, response_model=StatsAnswer)
    async def stats(video_id: VideoIdPath, user_id: UserIdQuery = None) -> Response:
        """Views, likes, dislikes, unique viewers and presence: baseline(C) + speed buckets >= C;
        `corrected_by_batch`: the views the batch took off the speed layer's count before C."""
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

    @router.get("/v1/videos/{video_id}/timeseries")
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

    return router
