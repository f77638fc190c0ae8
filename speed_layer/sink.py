"""The counts of a committed micro-batch reach the video-keyed read keys (`sink.lua`): per video, the
partition's absolute values of each bucket it changed, the viewers whose first bucket it set, the
bucket sketches' new digests, the pairs' reaction histories and the sessions' presence; then the
platform's buckets, trending and the videos index. Every write is idempotent, so the same entry may
be sunk again (after a restore) and loses or doubles nothing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
import redis.asyncio as aioredis

from counting import keys, rules
from counting.redisconn import ScriptCall, eval_each
from speed_layer.counter import PRESENCE_KEEP_MS
from speed_layer.plan import EXACT_VIEWERS_LIMIT
from speed_layer.state import SEP, PartitionState

LUA = Path(__file__).with_name("sink.lua").read_text()
_encoder = msgspec.msgpack.Encoder()


class _Video:
    """What one video's sink call writes."""

    __slots__ = ("absent", "buckets", "firsts", "newest_beat", "present", "reactions", "sketches")

    def __init__(self) -> None:
        self.buckets: list[list[object]] = []
        self.firsts: list[object] = []  # digest, first bucket, digest, ... (flat: HSET's arguments)
        self.sketches: list[list[object]] = []
        self.reactions: list[list[object]] = []
        self.present: list[object] = []  # ingest time, session, ... (flat: ZADD's arguments)
        self.absent: list[str] = []
        self.newest_beat = 0


# On a single Redis, one script call carries the items of many videos, up to about this many bytes
# (a call runs alone in Redis: a bounded one keeps readers waiting little).
CALL_BYTES = 256 << 10


@dataclass(frozen=True)
class SinkPlan:
    """The script calls of one committed entry, the video of each item of each call (None: the
    platform's item), and what else it writes."""

    calls: list[ScriptCall]
    items: list[list[str | None]]
    videos: list[str]
    views_expiry: dict[int, int]


def plan_sink(
    entry: Mapping[str, object],
    state: PartitionState,
    part: str,
    now_ms: int,
    retention_ms: int,
    regions: bool = False,
    cluster: bool = True,
) -> SinkPlan:
    """The sink's calls for a changelog entry of `state` (its presence entries are read from the
    state, whose newest values they are); with `regions`, the viewers' first buckets are kept the
    earliest of any region, with each bucket's `g_uniques` (decision 0006). On a `cluster`, one
    call a video (its keys share its slot); on a single Redis, few calls carry every video."""
    offset = int(entry["offset"])  # type: ignore[call-overload]
    bucket_ms = state.bucket_ms
    videos: dict[str, _Video] = defaultdict(_Video)

    def expire_at(bucket: int) -> int:
        return max(rules.bucket_start(bucket + 1, bucket_ms), now_ms) + retention_ms

    for key, fields in _items(entry, "counts"):
        video, _, bucket = key.rpartition(SEP)
        b = int(bucket)
        videos[video].buckets.append(
            [keys.bucket_counts(video, b), keys.bucket_parts(video, b), b, expire_at(b), fields or {}]
        )
    for key, first in _items(entry, "firsts"):
        video, _, digest = key.rpartition(SEP)
        if first is not None:
            videos[video].firsts += (digest, first)
    for key, digests in _items(entry, "sketches"):
        video, _, bucket = key.rpartition(SEP)
        b = int(bucket)
        videos[video].sketches.append([keys.viewers_sketch(video, b), expire_at(b), digests])
    for key, history in _items(entry, "reactions"):
        video, _, user = key.partition(SEP)
        if history:  # the script packs it: `values.decode_history` reads it
            videos[video].reactions.append([user, history])
    sessions = {k for table in ("beats", "leaves") for k, _ in _items(entry, table)}
    for key in sorted(sessions):
        video, _, session = key.partition(SEP)
        beat, leave = state.beats.get(key), state.leaves.get(key)
        target = videos[video]
        if beat is not None and (leave is None or beat > leave):
            target.present += (beat, session)
            target.newest_beat = max(target.newest_beat, beat)
        else:
            target.absent.append(session)
    items: list[tuple[str | None, str, bytes]] = []  # video, its key, the encoded item
    for video in sorted(videos):
        v = videos[video]
        arg = [
            part,
            offset,
            v.buckets,
            keys.buckets_index(video),
            keys.viewers(video),
            EXACT_VIEWERS_LIMIT,
            v.firsts,
            v.sketches,
            keys.reactions(video),
            v.reactions,
            keys.presence(video),
            v.present,
            v.absent,
            v.newest_beat - PRESENCE_KEEP_MS if v.newest_beat else 0,
            keys.bucket_counts(video, 0).removesuffix("0") if regions else "",
        ]
        items.append((video, keys.buckets_index(video), _encoder.encode(arg)))
    platform = [
        [keys.platform(int(b)), keys.platform_parts(int(b)), int(b), expire_at(int(b)), fields or {}]
        for b, fields in _items(entry, "platform")
    ]
    if platform:
        arg = [part, offset, platform, "", "", 0, [], [], "", [], "", [], [], 0, ""]
        items.append((None, keys.platform(int(platform[0][2])), _encoder.encode(arg)))  # type: ignore[call-overload]
    calls, of = _calls(items, cluster)
    expiry = {int(b[2]): int(b[3]) for v in videos.values() for b in v.buckets}  # type: ignore[call-overload]
    return SinkPlan(calls, of, sorted(videos), expiry)


def merged(plans: list[SinkPlan]) -> SinkPlan:
    """The sink plans of several partitions' entries as one (written in one pipeline, in order: a
    video bucket two partitions changed ends with the later call's sum, its newest)."""
    expiry: dict[int, int] = {}
    for plan in plans:
        for bucket, at in plan.views_expiry.items():
            expiry[bucket] = max(at, expiry.get(bucket, at))
    return SinkPlan(
        [c for plan in plans for c in plan.calls],
        [i for plan in plans for i in plan.items],
        sorted({v for plan in plans for v in plan.videos}),
        expiry,
    )


def _calls(
    items: list[tuple[str | None, str, bytes]], cluster: bool
) -> tuple[list[ScriptCall], list[list[str | None]]]:
    """Group the encoded items into script calls (each call's argument is the list of its items):
    one item a call on a cluster, up to `CALL_BYTES` a call otherwise."""
    calls: list[ScriptCall] = []
    of: list[list[str | None]] = []
    group: list[tuple[str | None, str, bytes]] = []
    size = 0
    for n, item in enumerate(items, 1):
        group.append(item)
        size += len(item[2])
        if cluster or size >= CALL_BYTES or n == len(items):
            calls.append((group[0][1], [_encoder.encode([msgspec.Raw(i[2]) for i in group])]))
            of.append([i[0] for i in group])
            group, size = [], 0
    return calls, of


async def sink(client: aioredis.Redis, plan: SinkPlan) -> None:
    """Write a sink plan: the script calls (pipelined), then each changed bucket's views into
    trending and the videos into the index."""
    if not plan.calls:
        return
    answers = await eval_each(client, LUA, plan.calls)
    for answer in answers:
        if isinstance(answer, Exception):
            raise answer
    async with client.pipeline(transaction=False) as pipe:
        trending: dict[int, dict[str, int]] = defaultdict(dict)
        for videos, answer in zip(plan.items, answers, strict=True):
            for video, moved in zip(videos, answer, strict=True):
                if video is not None:
                    for i in range(0, len(moved), 2):
                        trending[int(moved[i])][video] = int(moved[i + 1])
        for bucket, views in trending.items():
            counted = {video: n for video, n in views.items() if n > 0}
            if counted:
                pipe.zadd(keys.trending(bucket), counted)
                pipe.pexpireat(keys.trending(bucket), plan.views_expiry[bucket])
            gone = [video for video, n in views.items() if n <= 0]
            if gone:  # its views moved to another bucket: not in this bucket's ranking
                pipe.zrem(keys.trending(bucket), *gone)
        if plan.videos:
            pipe.sadd(keys.videos_index(), *plan.videos)
        await pipe.execute()


def _items(entry: Mapping[str, object], table: str) -> list[tuple[str, object]]:
    found = entry.get(table) or {}
    return list(found.items())  # type: ignore[attr-defined]
