"""Top videos by counted views over a window of speed buckets (the per-bucket trending sets)."""

from __future__ import annotations

from redis.asyncio import Redis

from counting import keys


async def top_videos(redis: Redis, first_bucket: int, last_bucket: int, limit: int) -> list[tuple[str, int]]:
    """The `limit` videos with the most counted views in buckets [first_bucket, last_bucket]."""
    names = [keys.trending(b) for b in range(first_bucket, last_bucket + 1)]
    if not names:
        return []
    ranked: list[tuple[bytes, float]] = await redis.zunion(names, aggregate="SUM", withscores=True)  # type: ignore[assignment]
    ordered = sorted(((m.decode(), int(s)) for m, s in ranked), key=lambda item: (-item[1], item[0]))
    return ordered[:limit]
