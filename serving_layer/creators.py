"""The creator route: a creator's videos together (views, likes, and its reach: unique viewers of
any of its videos), the batch's exact figures up to the cutoff merged with the speed layer's after
it, as `counting.oracle.creator_counts` defines them."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Path
from fastapi.responses import Response
from redis.asyncio import Redis
from sqlalchemy.exc import SQLAlchemyError

from counting import rules
from counting.display import readable
from counting.event import VIDEO_ID_PATTERN
from counting.settings import Settings
from serving_layer.baselines import BaselineCache
from serving_layer.cache import ReadCache
from serving_layer.errors import StoreUnavailable, UnknownCreator
from serving_layer.schemas import UNKNOWN_CREATOR, CreatorStats
from serving_layer.speed import new_viewers, read_videos, viewers_estimate
from serving_layer.stats import REDIS_ERRORS, Answer, encode_json, now_ms
from warehouse.catalog import creator_videos
from warehouse.connection import open_store
from warehouse.errors import StoreError

NO_REACH = (
    "the published batch run was made without the catalog, so it has no exact creator reach: "
    "unique viewers are an estimate; run 'tally batch run' (it reads the catalog)"
)
SKETCHED = "a video of the creator outgrew its exact viewer set: unique viewers are a HyperLogLog estimate"


def videos_of(store_url: str, creator_id: str) -> list[str]:
    """The creator's videos in the catalog (empty when the store has no catalog yet)."""
    try:
        with open_store(store_url) as store:
            if not sa.inspect(store.engine).has_table("videos"):
                return []
            return creator_videos(store, creator_id)
    except (SQLAlchemyError, StoreError) as exc:
        raise StoreUnavailable(
            f"the relational store is not readable ({exc}): load the catalog with 'tally catalog load' "
            "or set TALLY_DATABASE_URL"
        ) from exc


# The catalog changes rarely: a creator's video list is read from the store at most this often.
CATALOG_TTL_S = 30.0


def creators_router(settings: Settings, redis: Redis, baselines: BaselineCache) -> APIRouter:
    router = APIRouter()
    listed: dict[str, tuple[float, list[str]]] = {}

    async def videos_cached(creator_id: str) -> list[str]:
        now = time.monotonic()
        hit = listed.get(creator_id)
        if hit is not None and now - hit[0] < CATALOG_TTL_S:
            return hit[1]
        videos = await asyncio.to_thread(videos_of, settings.store_url, creator_id)
        if len(listed) > 100_000:
            listed.clear()
        if videos:  # an unknown creator is asked again: its catalog may be loaded any moment
            listed[creator_id] = (now, videos)
        return videos

    # A creator's answer, read once for every request within the bound a served count may be cached
    # (`serving_cache_ms`), and anew with each published baseline; a creator read often is read
    # again as its answer nears the bound, so its readers do not wait for the load of all its
    # videos (bench.serving, 2026-12-07: creator p99 14.6 and 17.9 ms against 48.0 and 30.9).
    answers: ReadCache[Answer] = ReadCache(refresh_after=0.8)
    bound = settings.serving_cache_ms / 1000

    @router.get(
        "/v1/creators/{creator_id}/stats",
        response_model=CreatorStats,
        responses=UNKNOWN_CREATOR,
    )
    async def creator_stats(
        creator_id: Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the creator id")],
    ) -> Response:
        """Views, likes, dislikes and unique viewers of the creator's videos together (up to
        `serving_cache_ms` old, as a video's stats)."""
        videos = await videos_cached(creator_id)
        if not videos:
            raise UnknownCreator(creator_id)
        baseline = baselines.get()
        key = f"{baseline.run_id if baseline else '-'}/{creator_id}"
        answer = await answers.get(key, bound, lambda: read_creator(creator_id, videos))
        return Response(answer.encoded, media_type="application/json")

    async def read_creator(creator_id: str, videos: list[str]) -> Answer:
        now = now_ms()
        baseline = baselines.get()
        cutoff = baseline.cutoff if baseline else 0
        from_bucket = rules.bucket_of(cutoff, settings.bucket_ms)
        views = likes = dislikes = 0
        for video_id in videos:
            row = baseline.get(video_id) if baseline else None
            if row is not None:
                views, likes, dislikes = views + row.views, likes + row.likes, dislikes + row.dislikes
        degraded: list[str] = []
        base_viewers = baselines.creator_viewers(creator_id) if baseline else 0
        try:
            reads, fresh = await asyncio.gather(
                read_videos(redis, videos, from_bucket, now), new_viewers(redis, videos, from_bucket)
            )
            for speed in reads:
                views, likes, dislikes = views + speed.views, likes + speed.likes, dislikes + speed.dislikes
            if fresh is not None and base_viewers is not None:
                unique = base_viewers + fresh
            else:
                degraded.append(SKETCHED if fresh is None else NO_REACH)
                unique = max(base_viewers or 0, await viewers_estimate(redis, videos))
        except REDIS_ERRORS as exc:
            if baseline is None:
                raise StoreUnavailable(
                    f"Redis is not reachable at {settings.redis_url} and no batch baseline is published "
                    f"({exc})"
                ) from exc
            degraded.append("speed layer unreachable: counts are the batch baseline only")
            unique = base_viewers or 0
        body = CreatorStats(
            creator_id=creator_id,
            videos=len(videos),
            views=views,
            likes=likes,
            dislikes=dislikes,
            unique_viewers=unique,
            views_display=readable(views),
            unique_viewers_display=readable(unique),
            as_of=now,
            batch_cutoff=baseline.cutoff if baseline else None,
            approx=bool(degraded),
            degraded=degraded,
        ).model_dump()
        return Answer(body, encode_json(body))

    return router
