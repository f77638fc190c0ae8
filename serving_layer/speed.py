"""Read the speed layer's per-bucket deltas of a video from Redis and sum them from a bucket on; read
the trending videos and the unique-viewer sketches."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import cast

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
    viewers_estimate: int | None = None

    @property
    def approx_uniques(self) -> bool:
        """True when the video outgrew the exact viewer set: `viewers_estimate` (a HyperLogLog of
        every viewer the speed layer has counted, all time) replaces the per-bucket `uniques`."""
        return self.viewers_estimate is not None


_PLAIN = ("views", "likes", "dislikes", "uniques", "short_views", "repeat_views")


async def read_speed(redis: Redis, video_id: str, from_bucket: int, now_ms: int) -> SpeedCounts:
    """Sum the buckets >= from_bucket of one video (two round trips) and count live sessions."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrangebyscore(keys.buckets_index(video_id), from_bucket, "+inf")
        pipe.zcount(keys.presence(video_id), now_ms - rules.PRESENCE_MS, "+inf")
        pipe.type(keys.viewers(video_id))
        buckets, watching, viewers_type = await pipe.execute()
    counts = SpeedCounts(watching_now=int(watching), buckets=len(buckets))
    sketched = viewers_type in (b"string", "string")
    if not buckets and not sketched:
        return counts
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in buckets:
            pipe.hgetall(keys.bucket_counts(video_id, int(bucket)))
        if sketched:
            pipe.pfcount(keys.viewers(video_id))
        hashes = await pipe.execute()
    if sketched:
        counts.viewers_estimate = int(hashes.pop())
    for values in hashes:
        for raw_name, raw_value in values.items():
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            value = int(raw_value)
            if name in _PLAIN:
                setattr(counts, name, getattr(counts, name) + value)
            elif name.startswith("rejected:") and name[9:] in REASONS:
                counts.rejected[name[9:]] = counts.rejected.get(name[9:], 0) + value
    return counts


async def top_videos(redis: Redis, from_bucket: int, to_bucket: int, n: int) -> list[tuple[str, int]]:
    """The `n` videos with the most counted views in buckets from_bucket..to_bucket (inclusive), most
    viewed first, from the per-bucket trending sorted sets (kept as long as the speed buckets)."""
    if n <= 0 or to_bucket < from_bucket:
        return []
    names = [keys.trending(b) for b in range(from_bucket, to_bucket + 1)]
    rows: list[tuple[bytes | str, float]]
    if len(names) == 1:
        single = await redis.zrange(names[0], 0, n - 1, desc=True, withscores=True)
        rows = cast(list[tuple[bytes | str, float]], single)
    else:
        temp = f"{keys.PREFIX}:trending:tmp:{uuid.uuid4().hex}"
        async with redis.pipeline(transaction=True) as pipe:
            pipe.zunionstore(temp, names)
            pipe.zrange(temp, 0, n - 1, desc=True, withscores=True)
            pipe.delete(temp)
            _, rows, _ = await pipe.execute()
    ranked = [(_text(member), int(score)) for member, score in rows]
    ranked.sort(key=lambda row: (-row[1], row[0]))
    return ranked


async def unique_viewers_between(redis: Redis, video_id: str, from_bucket: int, to_bucket: int) -> int:
    """Distinct viewers counted for a video in buckets from_bucket..to_bucket (inclusive): the union
    of the per-bucket HyperLogLogs (within about 1 %; a viewer in several buckets counts once)."""
    if to_bucket < from_bucket:
        return 0
    buckets = await redis.zrangebyscore(keys.buckets_index(video_id), from_bucket, to_bucket)
    if not buckets:
        return 0
    names = [keys.viewers_sketch(video_id, int(b)) for b in cast(list[bytes], buckets)]
    return int(await redis.pfcount(*names))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def has_speed_state(redis: Redis, topic: str, partitions: int) -> bool:
    """False when no counter owns any partition of the topic in this Redis: the speed state is new
    or was lost (flushed, restarted without persistence)."""
    found = await redis.exists(*(keys.partition_owner(topic, p) for p in range(partitions)))
    return int(found) > 0
