"""Read the speed layer's per-bucket deltas of a video from Redis and sum them from a bucket on."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis

from counting import keys, rules
from counting.bots import REASONS


@dataclass
class SpeedCounts:
    """The sum of a video's speed deltas over a range of buckets, plus its live presence."""

    views: int = 0
    likes: int = 0
    dislikes: int = 0
    uniques: int = 0
    short_views: int = 0
    repeat_views: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    watching_now: int = 0
    buckets: int = 0


_PLAIN = ("views", "likes", "dislikes", "uniques", "short_views", "repeat_views")


async def read_speed(redis: Redis, video_id: str, from_bucket: int, now_ms: int) -> SpeedCounts:
    """Sum the buckets >= from_bucket of one video (two round trips) and count live sessions."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrangebyscore(keys.buckets_index(video_id), from_bucket, "+inf")
        pipe.zcount(keys.presence(video_id), now_ms - rules.PRESENCE_MS, "+inf")
        buckets, watching = await pipe.execute()
    counts = SpeedCounts(watching_now=int(watching), buckets=len(buckets))
    if not buckets:
        return counts
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in buckets:
            pipe.hgetall(keys.bucket_counts(video_id, int(bucket)))
        hashes = await pipe.execute()
    for values in hashes:
        for raw_name, raw_value in values.items():
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            value = int(raw_value)
            if name in _PLAIN:
                setattr(counts, name, getattr(counts, name) + value)
            elif name.startswith("rejected:") and name[9:] in REASONS:
                counts.rejected[name[9:]] = counts.rejected.get(name[9:], 0) + value
    return counts


async def read_reaction(redis: Redis, video_id: str, user_id: str) -> str:
    """The reaction state of a user for a video as the speed layer keeps it: liked, disliked, none."""
    raw = await redis.hget(keys.reactions(video_id), user_id)
    if raw is None:
        return rules.NONE
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return text.rsplit("|", 1)[-1]
