"""The counts of a committed micro-batch reach the video-keyed read keys: per video, the partition's
absolute values of each bucket it changed (`sink.lua`, which moves the buckets' sums by the
difference with this partition's part stored before), the viewers whose first bucket it set, the
bucket sketches' new digests, the pairs' reaction histories and the partition's sessions watching
by second (`keys.watching`, the whole part rewritten: a replay writes the same); then the
platform's buckets, trending and the videos index. Every write is idempotent, so the same entry may
be sunk again (after a restore) and loses or doubles nothing.

A video's per-event writes (viewers, sketches, reactions, presence) go as plain commands on a
single Redis when they are many (`PLAIN_COMMANDS_FROM` arguments or more), in its script call
otherwise: a script's Lua costs Redis, the one core every worker shares, more than plain commands,
while each command's reply costs the worker more than a script's argument. On a Redis Cluster they
stay in the script call, whose Redis work the nodes share. The measurements:
docs/decisions/0005-speed-layer-state.md, "Measured since it was built" (`bench.script_or_commands`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from redis.exceptions import ResponseError

from counting import keys, rules, values
from counting.redisconn import AsyncRedis, ScriptCall, eval_each
from speed_layer.state.firsts import viewers_in
from speed_layer.state.partition import EXACT_VIEWERS_LIMIT, PRESENCE_KEEP_MS, SEP, PartitionState
from speed_layer.state.per_video import NO_ROWS, Videos

LUA = Path(__file__).with_name("sink.lua").read_text()
_encoder = msgspec.msgpack.Encoder()


class _Video:
    """What one video's sink writes."""

    __slots__ = ("buckets", "firsts", "reactions", "sketches", "watching", "watching_until")

    def __init__(self) -> None:
        self.buckets: list[list[object]] = []
        self.firsts: list[object] = []  # digest, first bucket, digest, ... (flat: HSET's arguments)
        self.sketches: list[tuple[str, int, list[str]]] = []
        self.reactions: list[object] = []  # user, history rows, ... (flat)
        self.watching: list[int] = []  # second, sessions, ... (newest second first)
        self.watching_until = 0  # when the watching hash may expire; 0: presence not written


# On a single Redis, one script call carries the items of many videos, up to about this many bytes
# (a call runs alone in Redis: a bounded one keeps readers waiting little).
CALL_BYTES = 256 << 10
# The viewer sets this process found folded into a HyperLogLog (or full): their viewers go by script
# from then on, in the video's call, not by a command that Redis refuses (WRONGTYPE) and a second
# round trip. Either way is correct (the script checks the key's type), so a stale entry only costs
# a set that was deleted and made again its plain commands.
FOLDED: set[str] = set()
# On a single Redis, a video's per-event writes go as plain commands from this many arguments (its
# viewers, digests, reactions and sessions), in its script call below: redis-py spends about 10 µs
# of the worker's CPU on a command's reply, Redis about 0.5 µs more an argument in Lua.
PLAIN_COMMANDS_FROM = 64
# A plain command: its name and arguments.
Command = tuple[object, ...]


@dataclass(frozen=True)
class SinkPlan:
    """The script calls of one committed entry and the video of each item of each call (None: the
    platform's item); the plain commands that follow them; each video's viewers (its viewers key
    and the flat digest, first bucket pairs) with the items that would write them by script."""

    calls: list[ScriptCall]
    items: list[list[str | None]]
    videos: list[str]
    views_expiry: dict[int, int]
    commands: list[Command] = field(default_factory=list)
    viewers: list[tuple[str, list[object], bytes]] = field(default_factory=list)


def plan_sink(
    entry: Mapping[str, object],
    state: PartitionState,
    part: str,
    now_ms: int,
    retention_ms: int,
    regions: bool = False,
    cluster: bool = True,
) -> SinkPlan:
    """The sink's calls and commands for a changelog entry of `state` (its presence entries are read
    from the state, whose newest values they are); with `regions`, the viewers' first buckets are
    kept the earliest of any region, with each bucket's `g_uniques` (decision 0006), by the script.
    On a `cluster`, one call a video (its keys share its slot); on a single Redis, few calls carry
    every video."""
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
    for video, digest, first in viewers_in(entry.get("firsts") or NO_ROWS):  # type: ignore[arg-type]
        videos[video].firsts += (digest, first)
    for key, digests in _items(entry, "sketches"):
        video, _, bucket = key.rpartition(SEP)
        b = int(bucket)
        videos[video].sketches.append((keys.viewers_sketch(video, b), expire_at(b), digests))  # type: ignore[arg-type]
        if state.viewers_of.get(video, 0) >= EXACT_VIEWERS_LIMIT:
            # Past the partition's exact limit its new viewers have no first bucket: they reach the
            # video's HyperLogLog (folded by then: this partition alone filled its exact set) with
            # the bucket's digests, an idempotent add.
            for digest in digests:  # type: ignore[attr-defined]
                videos[video].firsts += (digest, b)
    for key, history in _items(entry, "reactions"):
        video, _, user = key.partition(SEP)
        if history:
            videos[video].reactions += (user, history)
    # Presence: each video whose sessions moved, its part whole (the seconds a reader may still
    # count, `PRESENCE_KEEP_MS` back from the partition's newest event, allowing for clocks behind).
    oldest = rules.presence_second(state.newest_ingest - PRESENCE_KEEP_MS)
    sessions: Videos = entry.get("sessions") or NO_ROWS  # type: ignore[assignment]
    for video in sorted(sessions[0]):
        seconds = state.watching_of(video)
        target = videos[video]
        for second in sorted(seconds, reverse=True):
            if second < oldest:
                break
            target.watching += (second, seconds[second])
        newest = target.watching[0] if target.watching else rules.presence_second(state.newest_ingest)
        target.watching_until = (newest + 1) * 1000 + PRESENCE_KEEP_MS
    items: list[tuple[str | None, str, bytes]] = []  # video, its key, the encoded item
    commands: list[Command] = []
    viewers: list[tuple[str, list[object], bytes]] = []
    for video in sorted(videos):
        v = videos[video]
        args = len(v.firsts) + len(v.reactions) + len(v.watching)
        args += sum(len(digests) for _, _, digests in v.sketches)
        by_commands = not cluster and args >= PLAIN_COMMANDS_FROM
        firsts = [] if by_commands and not regions and keys.viewers(video) not in FOLDED else v.firsts
        per_event = [
            [[sketch, expire, digests] for sketch, expire, digests in v.sketches],
            keys.reactions(video),
            v.reactions,
            keys.watching(video) if v.watching_until else "",
            v.watching,
            v.watching_until,
        ]
        if by_commands:  # see the module's doc
            commands += _commands(part, per_event)
            per_event = _NONE
        if v.buckets or firsts or per_event is not _NONE:
            prefix = keys.bucket_counts(video, 0).removesuffix("0") if regions else ""
            arg = [
                part,
                offset,
                v.buckets,
                keys.buckets_index(video),
                keys.viewers(video),
                EXACT_VIEWERS_LIMIT,
            ]
            items.append(
                (video, keys.buckets_index(video), _encoder.encode([*arg, firsts, prefix, *per_event]))
            )
        if v.firsts and not firsts:  # by command; by script too once the video's hash is full
            arg = [part, offset, [], "", keys.viewers(video), EXACT_VIEWERS_LIMIT, v.firsts, "", *_NONE]
            viewers.append((keys.viewers(video), v.firsts, _encoder.encode(arg)))
    platform = [
        [keys.platform(int(b)), keys.platform_parts(int(b)), int(b), expire_at(int(b)), fields or {}]
        for b, fields in _items(entry, "platform")
    ]
    if platform:
        arg = [part, offset, platform, "", "", 0, [], "", *_NONE]
        items.append((None, keys.platform(int(platform[0][2])), _encoder.encode(arg)))  # type: ignore[call-overload]
    calls, of = _calls(items, cluster)
    expiry = {int(b[2]): int(b[3]) for v in videos.values() for b in v.buckets}  # type: ignore[call-overload]
    return SinkPlan(calls, of, sorted(videos), expiry, commands, viewers)


_NONE = [[], "", [], "", [], 0]  # an item's per-event writes when it has none


def _commands(part: str, per_event: list[object]) -> list[Command]:
    """A video's per-event writes (an item's last six fields) as plain commands."""
    sketches, reactions_key, reactions, watching, seconds, until = per_event
    commands: list[Command] = []
    for sketch, expire, digests in sketches:  # type: ignore[attr-defined]
        commands += [("PFADD", sketch, *digests), ("PEXPIREAT", sketch, expire)]
    if reactions:  # packed here; the script packs them with cmsgpack (which takes no binary input)
        flat: list[object] = list(reactions)  # type: ignore[call-overload]
        flat[1::2] = [values.encode_history_rows(rows) for rows in flat[1::2]]  # type: ignore[arg-type]
        commands.append(("HSET", reactions_key, *flat))
    if watching:  # as sink.lua writes it
        if seconds:
            commands.append(("HSET", watching, part, _encoder.encode(seconds)))
        else:
            commands.append(("HDEL", watching, part))
        commands += [("PEXPIREAT", watching, until, "NX"), ("PEXPIREAT", watching, until, "GT")]
    return commands


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
        [c for plan in plans for c in plan.commands],
        [v for plan in plans for v in plan.viewers],
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


async def sink(client: AsyncRedis, plan: SinkPlan) -> None:
    """Write a sink plan: the script calls (pipelined), then in one pipeline the plain commands, the
    viewers (HSET, then HLEN), each changed bucket's views into trending and the videos into the
    index; last, by script, the viewers of a video whose hash is full (folded into a HyperLogLog)."""
    if not (plan.calls or plan.commands or plan.viewers):
        return
    answers = await eval_each(client, LUA, plan.calls) if plan.calls else []
    for answer in answers:
        if isinstance(answer, Exception):
            raise answer
    async with client.pipeline(transaction=False) as pipe:
        for command in plan.commands:
            pipe.execute_command(*command)
        for key, firsts, _ in plan.viewers:
            pipe.execute_command("HSET", key, *firsts)
            pipe.execute_command("HLEN", key)
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
        replies = await pipe.execute(raise_on_error=False)
    done = len(plan.commands)
    full = []
    for n, (key, _, item) in enumerate(plan.viewers):
        stored, size = replies[done + 2 * n], replies[done + 2 * n + 1]
        if _wrong_type(stored) and _wrong_type(size):
            replies[done + 2 * n] = replies[done + 2 * n + 1] = None
            full.append((key, item))  # a HyperLogLog already: its digests go in by script
        elif not isinstance(size, Exception) and size >= EXACT_VIEWERS_LIMIT:
            full.append((key, item))  # a full hash: the script folds it into a HyperLogLog
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    if full:
        FOLDED.update(key for key, _ in full)
        calls, _ = _calls([(None, key, item) for key, item in full], cluster=True)
        for answer in await eval_each(client, LUA, calls):
            if isinstance(answer, Exception):
                raise answer


def _wrong_type(reply: object) -> bool:
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


def _items(entry: Mapping[str, object], table: str) -> list[tuple[str, object]]:
    found = entry.get(table) or {}
    return list(found.items())  # type: ignore[attr-defined]
