"""Read the speed layer's per-bucket deltas of a video from Redis and sum them from a bucket on; read
the trending videos and the unique-viewer sketches."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from counting import keys, rules
from counting.counts import VideoCounts
from counting.signals import REASONS


@dataclass(frozen=True)
class ViewsBefore:
    """A video's views in the speed buckets before a range, as the speed layer judged them: those it
    counted, and all it judged (counted, too short, repeated or rejected), to be set against a
    batch baseline of the same buckets (`serving_layer.merge.corrected_by_batch`)."""

    views: int = 0
    judged: int = 0


@dataclass(frozen=True)
class SpeedCounts(VideoCounts):
    """The sum of a video's speed deltas over a range of buckets (`unique_viewers`: the viewers the
    speed layer first counted in them), plus its live presence; `before`: the views of the buckets
    before the range still in Redis, when read."""

    watching_now: int = 0
    buckets: int = 0
    viewers_estimate: int | None = None
    before: ViewsBefore | None = None

    @property
    def approx_uniques(self) -> bool:
        """True when the video outgrew the exact viewer set: `viewers_estimate` (a HyperLogLog of
        every viewer the speed layer has counted, all time) replaces the per-bucket `uniques`."""
        return self.viewers_estimate is not None


# How long a scratch key of a read may outlive the read that failed to delete it.
SCRATCH_TTL_MS = 60_000

# The plain fields of a bucket hash, by the count of `SpeedCounts` each sums into.
_PLAIN = {
    "views": "views",
    "likes": "likes",
    "dislikes": "dislikes",
    "uniques": "unique_viewers",
    "short_views": "short_views",
    "repeat_views": "repeat_views",
    "flagged": "flagged",
}

# A video's whole speed side in one read-only script. KEYS: its buckets index, viewers and watching
# (its sessions by second, a part per partition, newest second first); ARGV: the first bucket, the
# prefix of its bucket-counts keys, the first second still watching (`rules.watching_from`), and "1"
# to read the buckets before the first too. Every key it reads carries the video's hash tag, so the
# script stays in one Redis Cluster slot. Answers [buckets, watching, sketched, estimate, views
# before, judged before, field, sum, field, sum, ...]: each field of the bucket hashes summed over
# the buckets, in order of first sight (what summing them in Python gave); before the first bucket
# (when asked, else 0): the counted views, and the views judged in any way (counted, short,
# repeated, rejected).
_READ_LUA = """
local buckets = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf')
local watching = 0
local from = tonumber(ARGV[3])
for _, part in ipairs(redis.call('HVALS', KEYS[3])) do
  local seconds = cmsgpack.unpack(part)
  for i = 1, #seconds, 2 do
    if seconds[i] < from then break end
    watching = watching + seconds[i + 1]
  end
end
local answer = {#buckets, watching, 0, 0, 0, 0}
if redis.call('TYPE', KEYS[2]).ok == 'string' then
  answer[3] = 1
  answer[4] = redis.call('PFCOUNT', KEYS[2])
end
if ARGV[4] == '1' then
  for _, bucket in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])) do
    local flat = redis.call('HGETALL', ARGV[2] .. string.format('%d', tonumber(bucket)))
    for i = 1, #flat, 2 do
      local name = flat[i]
      if name == 'views' then answer[5] = answer[5] + tonumber(flat[i + 1]) end
      if name == 'views' or name == 'short_views' or name == 'repeat_views'
          or string.sub(name, 1, 9) == 'rejected:' then
        answer[6] = answer[6] + tonumber(flat[i + 1])
      end
    end
  end
end
local sums, names = {}, {}
for _, bucket in ipairs(buckets) do
  local flat = redis.call('HGETALL', ARGV[2] .. string.format('%d', tonumber(bucket)))
  for i = 1, #flat, 2 do
    local name = flat[i]
    if sums[name] == nil then
      sums[name] = 0
      names[#names + 1] = name
    end
    sums[name] = sums[name] + tonumber(flat[i + 1])
  end
end
for _, name in ipairs(names) do
  answer[#answer + 1] = name
  answer[#answer + 1] = sums[name]
end
return answer
"""
_READ_SHA = hashlib.sha1(_READ_LUA.encode()).hexdigest()


async def read_speed(redis: Redis, video_id: str, from_bucket: int, now_ms: int) -> SpeedCounts:
    """Sum the buckets >= from_bucket of one video and count its live sessions (one round trip)."""
    counts, _ = await read_video(redis, video_id, from_bucket, now_ms, ())
    return counts


async def read_video(
    redis: Redis,
    video_id: str,
    from_bucket: int,
    now_ms: int,
    owners: Sequence[str],
    uniques_field: str = "uniques",
    before: bool = False,
) -> tuple[SpeedCounts, bool]:
    """`read_speed`, and whether any of the `owners` keys exists (`speed_state_keys`), in one round
    trip: the sums are made by a read-only script next to the data, so a miss of the read cache
    costs one request to Redis however many buckets the video has. `uniques_field`: with several
    regions, `g_uniques` (a viewer of two regions counted once, `sink.lua`). `before`: also the
    views of the buckets before `from_bucket` still in Redis (`SpeedCounts.before`)."""
    replies = await _read(redis, [video_id], from_bucket, now_ms, owners, before)
    counts = _counts(replies[0], uniques_field, before)
    return counts, any(int(found) for found in replies[1:])


async def read_videos(
    redis: Redis, video_ids: Sequence[str], from_bucket: int, now_ms: int
) -> list[SpeedCounts]:
    """`read_speed` of many videos (a creator's) in one round trip."""
    replies = await _read(redis, video_ids, from_bucket, now_ms, (), False)
    return [_counts(flat, "uniques", False) for flat in replies]


async def _read(
    redis: Redis, video_ids: Sequence[str], from_bucket: int, now_ms: int, owners: Sequence[str], before: bool
) -> list[Any]:
    """The read script's answer for each video, then one EXISTS answer for each of the `owners`."""
    first_second = rules.watching_from(now_ms)
    for attempt in (1, 2):
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for video_id in video_ids:
                    # The command, not pipe.evalsha: redis-py's cluster pipeline refuses that method;
                    # the command is routed by its keys (one slot: the video's) either way.
                    pipe.execute_command(
                        "EVALSHA",
                        _READ_SHA,
                        3,
                        keys.buckets_index(video_id),
                        keys.viewers(video_id),
                        keys.watching(video_id),
                        from_bucket,
                        keys.bucket_counts(video_id, 0).removesuffix("0"),
                        first_second,
                        "1" if before else "0",
                    )
                for owner in owners:  # one EXISTS each: on a cluster the owners lie in many slots
                    pipe.exists(owner)
                return cast(list[Any], await pipe.execute())
        except NoScriptError:  # a Redis that has not seen the script yet (new, restarted, flushed)
            if attempt == 2:
                raise
            await redis.script_load(_READ_LUA)
    raise AssertionError("unreachable")  # pragma: no cover


def _counts(flat: list[Any], uniques_field: str, before: bool) -> SpeedCounts:
    """A video's `SpeedCounts` from the read script's answer."""
    plain: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for i in range(6, len(flat), 2):
        name = _text(flat[i])
        value = int(flat[i + 1])
        if name == uniques_field:
            plain["unique_viewers"] = value
        elif name in _PLAIN and name != "uniques":
            plain[_PLAIN[name]] = value
        elif name.startswith("rejected:") and name[9:] in REASONS:
            rejected[name[9:]] = value
    return SpeedCounts(
        views=plain.get("views", 0),
        likes=plain.get("likes", 0),
        dislikes=plain.get("dislikes", 0),
        unique_viewers=plain.get("unique_viewers", 0),
        rejected=rejected,
        short_views=plain.get("short_views", 0),
        repeat_views=plain.get("repeat_views", 0),
        flagged=plain.get("flagged", 0),
        watching_now=int(flat[1]),
        buckets=int(flat[0]),
        viewers_estimate=int(flat[3]) if flat[2] else None,
        before=ViewsBefore(int(flat[4]), int(flat[5])) if before else None,
    )


def speed_state_keys(topic: str, partitions: int) -> tuple[str, ...]:
    """The keys of which one exists when a counter owns a partition of the topic in this Redis; none
    when the speed state is new or was lost (flushed, restarted without persistence)."""
    return tuple(keys.counter_owner(topic, p) for p in range(partitions))


# _UNION: a union of trending buckets is made into a scratch key of their slot, read and deleted
# by one pipeline; not a transaction (the scratch key is the request's own, and redis-py's cluster
# client runs MULTI in a thread and loop of its own, which fails under a running event loop).
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
        temp = keys.trending_scratch(uuid.uuid4().hex)
        async with redis.pipeline(transaction=False) as pipe:  # see _UNION
            pipe.zunionstore(temp, names)
            pipe.zrange(temp, 0, n - 1, desc=True, withscores=True)
            pipe.delete(temp)
            _, rows, _ = await pipe.execute()
    ranked = [(_text(member), int(score)) for member, score in rows]
    ranked.sort(key=lambda row: (-row[1], row[0]))
    return ranked


async def platform_counts(redis: Redis, from_bucket: int, to_bucket: int) -> dict[str, int]:
    """Every video's bucket counts summed over buckets from_bucket..to_bucket (inclusive): views,
    likes, dislikes, short_views, repeat_views and rejected:<reason> (`keys.platform`)."""
    if to_bucket < from_bucket:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in range(from_bucket, to_bucket + 1):
            pipe.hgetall(keys.platform(bucket))
        hashes = await pipe.execute()
    totals: dict[str, int] = {}
    for fields in hashes:
        for name, value in fields.items():
            field = _text(name)
            totals[field] = totals.get(field, 0) + int(value)
    return totals


async def window_views(redis: Redis, from_bucket: int, to_bucket: int) -> dict[str, int]:
    """Every video's counted views in buckets from_bucket..to_bucket (inclusive), from the per-bucket
    trending sorted sets; videos without views there are left out."""
    if to_bucket < from_bucket:
        return {}
    names = [keys.trending(b) for b in range(from_bucket, to_bucket + 1)]
    temp = keys.trending_scratch(uuid.uuid4().hex)
    async with redis.pipeline(transaction=False) as pipe:  # see _UNION
        pipe.zunionstore(temp, names)
        pipe.zrange(temp, 0, -1, withscores=True)
        pipe.delete(temp)
        _, rows, _ = await pipe.execute()
    return {_text(member): int(score) for member, score in rows if int(score) > 0}


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


async def new_viewers(redis: Redis, video_ids: list[str], from_bucket: int) -> int | None:
    """How many viewers the speed layer first counted, across `video_ids` together, in a bucket
    >= from_bucket: the viewers of their exact viewer sets (digest -> first bucket) whose earliest
    first bucket over the videos is there. None when a video outgrew its exact set (only a
    HyperLogLog is left of it): then no exact answer exists."""
    if not video_ids:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for video_id in video_ids:
            pipe.hgetall(keys.viewers(video_id))
        sets = await pipe.execute(raise_on_error=False)  # a HyperLogLog's key answers WRONGTYPE
    errors = [reply for reply in sets if isinstance(reply, Exception)]
    if errors:
        other = next((e for e in errors if not str(e).startswith("WRONGTYPE")), None)
        if other is not None:
            raise other
        return None
    first: dict[bytes, int] = {}
    for viewers in sets:
        for digest, bucket in viewers.items():
            b = int(bucket)
            if b < first.get(digest, b + 1):
                first[digest] = b
    return sum(1 for b in first.values() if b >= from_bucket)


async def viewers_estimate(redis: Redis, video_ids: list[str]) -> int:
    """Distinct viewers the speed layer ever counted across `video_ids` (HyperLogLog union, within
    about 1 %): the exact sets' digests are added to a scratch sketch beside the others."""
    names = [keys.viewers(v) for v in video_ids]
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.type(name)
        kinds = [_text(kind) for kind in await pipe.execute()]
    # The videos' keys lie in many slots of a Redis Cluster; PFCOUNT takes keys of one. So the
    # exact sets' digests go into one scratch sketch, and each HyperLogLog is copied (DUMP and
    # RESTORE, unchanged) beside it under the scratch's own tag, then counted together.
    tag = uuid.uuid4().hex
    scratch = [keys.reach_scratch(tag, "exact")]
    try:
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
            if kind == "hash":
                digests = await redis.hkeys(name)
                if digests:
                    await redis.pfadd(scratch[0], *digests)
            elif kind == "string":
                dumped = await redis.dump(name)
                if dumped is not None:
                    copy = keys.reach_scratch(tag, str(i))
                    await redis.restore(copy, SCRATCH_TTL_MS, dumped, replace=True)
                    scratch.append(copy)
        return int(await redis.pfcount(*scratch))
    finally:
        await redis.delete(*scratch)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
