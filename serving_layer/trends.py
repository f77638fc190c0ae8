"""The trending routes: top videos by views or by velocity over recent speed buckets, and one
video's rank (the rules: `counting.trends`); the scope that labels such a window as one."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from redis.asyncio import Redis

from counting import trends
from counting.event import VIDEO_ID_PATTERN
from counting.settings import Settings
from serving_layer.cache import ReadCache
from serving_layer.errors import StoreUnavailable
from serving_layer.schemas import RankAnswer, Scope, TrendingAnswer, TrendingVideo
from serving_layer.speed import top_videos, window_views
from serving_layer.stats import REDIS_ERRORS, now_ms
from serving_layer.timeseries import MAX_BUCKETS

WindowBuckets = Annotated[
    int, Query(ge=1, le=MAX_BUCKETS, description="how many recent buckets, the current one included")
]


def speed_window(window_buckets: int, bucket_ms: int) -> Scope:
    """The scope of figures summed over the last `window_buckets` speed buckets (the current one
    up to now): the speed layer's counts as it made them, not totals and not corrected by a batch."""
    return Scope(
        source="speed",
        window_buckets=window_buckets,
        text=f"speed layer, last {window_buckets} buckets of {span_text(bucket_ms)}: counted as the "
        "events came, before a batch corrects them; not totals",
    )


def span_text(ms: int) -> str:
    """A bucket's width in words: "2 s", "5 min", "1 h", "1.5 h"."""
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms >= size:
            return f"{ms / size:g} {unit}"
    return f"{ms} ms"


async def rising_videos(
    redis: Redis, now: int, bucket_ms: int, window_buckets: int, baseline_buckets: int, limit: int
) -> list[TrendingVideo]:
    """The `limit` videos rising fastest over the window ending now (`counting.trends.velocities`)."""
    first, last, base_first, base_last = trends.windows(now, bucket_ms, window_buckets, baseline_buckets)
    recent = await window_views(redis, first, last)
    baseline = await window_views(redis, base_first, base_last)
    found = trends.velocities(recent, baseline, now, bucket_ms, window_buckets, baseline_buckets)
    return [
        TrendingVideo(
            video_id=v.video_id,
            views=v.recent_views,
            views_per_minute=v.views_per_minute,
            baseline_per_minute=v.baseline_per_minute,
            rise=v.rise,
        )
        for v in found[:limit]
    ]


def trends_router(settings: Settings, redis: Redis) -> APIRouter:
    router = APIRouter()
    # A window's standings (every video's place), read once and asked by every rank request of that
    # window for as long as a served count may be cached; with the time they were read.
    standings: ReadCache[tuple[int, trends.Standings]] = ReadCache(max_entries=64)
    bound = settings.serving_cache_ms / 1000

    async def read_standings(first: int, last: int, now: int) -> tuple[int, trends.Standings]:
        return now, trends.Standings(await window_views(redis, first, last))

    def unreachable(exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            f"trending needs the speed layer and Redis is not reachable at {settings.redis_url} ({exc})"
        )

    @router.get("/v1/trending", response_model=TrendingAnswer, response_model_exclude_none=True)
    async def trending(
        window_buckets: WindowBuckets = 6,
        limit: Annotated[int, Query(ge=1, le=100)] = 10,
        by: Annotated[
            Literal["views", "velocity"],
            Query(description="views: most counted views; velocity: fastest rising against its own past"),
        ] = "views",
        baseline_buckets: Annotated[
            int,
            Query(
                ge=1,
                le=MAX_BUCKETS,
                description="velocity: the buckets before the window it is weighed against",
            ),
        ] = trends.DEFAULT_BASELINE_BUCKETS,
    ) -> TrendingAnswer:
        """Top videos over the last `window_buckets` speed buckets: by counted views, or by velocity
        (views a minute in the window against the `baseline_buckets` before it)."""
        now = now_ms()
        first, last, _, _ = trends.windows(now, settings.bucket_ms, window_buckets, baseline_buckets)
        try:
            if by == "views":
                top = await top_videos(redis, first, last, limit)
                videos = [TrendingVideo(video_id=v, views=n) for v, n in top]
            else:
                videos = await rising_videos(
                    redis, now, settings.bucket_ms, window_buckets, baseline_buckets, limit
                )
        except REDIS_ERRORS as exc:
            raise unreachable(exc) from exc
        return TrendingAnswer(
            by=by,
            window_buckets=window_buckets,
            baseline_buckets=baseline_buckets if by == "velocity" else None,
            bucket_ms=settings.bucket_ms,
            as_of=now,
            scope=speed_window(window_buckets, settings.bucket_ms),
            videos=videos,
        )

    @router.get("/v1/videos/{video_id}/rank", response_model=RankAnswer)
    async def rank(
        video_id: Annotated[str, Path(pattern=VIDEO_ID_PATTERN, description="the video id")],
        window_buckets: WindowBuckets = 6,
    ) -> RankAnswer:
        """The video's place by counted views over the last `window_buckets` speed buckets (the
        window's standings are read once for every video asked within the serving cache's bound)."""
        now = now_ms()
        first, last, _, _ = trends.windows(now, settings.bucket_ms, window_buckets, 0)
        try:
            as_of, table = await standings.get(
                f"{first}:{last}", bound, lambda: read_standings(first, last, now)
            )
        except REDIS_ERRORS as exc:
            raise unreachable(exc) from exc
        place = table.place(video_id)
        return RankAnswer(
            video_id=video_id,
            window_buckets=window_buckets,
            bucket_ms=settings.bucket_ms,
            as_of=as_of,
            scope=speed_window(window_buckets, settings.bucket_ms),
            views=place.views,
            rank=place.rank,
            of=place.of,
        )

    return router
