"""A hot video's move from its home partition to its shards (docs/decisions/0005, "What crosses a
change of a video's shard count"). The counter of the video's home partition, which alone sees all
of it while it has one shard, plans its shards once and ahead (`ShardPlan`: from a moment every
ingest process will know of); once it has applied every event ingested before that moment, it
hands the state of the viewers that move (their event ids, windows, first buckets, reactions, and
the sessions watching) to the partitions they move to, then marks the hand-off closed and drops the
sessions it handed over (each is counted watching by one partition). A shard partition holds the
video's events until it has taken its part over. No count moves: each partition's parts keep what
it counted, and readers sum the parts."""

from __future__ import annotations

import msgspec
import numpy as np
import redis.asyncio as aioredis

from counting import keys, rules
from counting.values import ShardPlan, encode_shard_plan
from counting.wire import partition_for, record_key
from speed_layer.state.partition import SEP, PartitionState
from speed_layer.state.presence import RECORD
from speed_layer.state.seen import video_tag

# A plan holds from this far ahead: more than the time an ingest process trusts what it read.
NOTICE_MS = rules.SHARD_CACHE_MS + 1_000
# Fields a hand-off write sends at a time; the bytes of rows (markers, windows) in one field.
CHUNK = 2_000
ROWS_BYTES = 960_000
_encoder = msgspec.msgpack.Encoder()


def home_of(video: str, partitions: int) -> int:
    """The partition every event of a video reaches while it has one shard."""
    return partition_for(record_key(video, 0), partitions)


def moved_entries(
    state: PartitionState, video: str, shards: int, partitions: int
) -> dict[int, dict[str, bytes]]:
    """The entries of the video's viewers that its plan sends away from `state`'s partition (the
    home), by the partition they go to, as `table SEP key` -> encoded value."""
    home = home_of(video, partitions)

    def partition_of(route: int) -> int:
        return partition_for(record_key(video, route % shards), partitions)

    found: dict[int, dict[str, bytes]] = {}
    prefix = video + SEP

    def put(table: str, key: str, value: object, route: int) -> None:
        partition = partition_of(route)
        if partition != home:
            found.setdefault(partition, {})[table + SEP + key] = _encoder.encode(value)

    tag = video_tag(video)
    # The markers and the windows go as their tables' records.
    for table, rows in (("seen", state.seen.of_video(tag)), ("windows", state.windows.rows("tag", tag))):
        if not rows.size:
            continue
        shard = rows["route"] % shards
        for route in np.unique(shard).tolist():
            partition = partition_of(route)
            if partition != home:
                moved = rows[shard == route].tobytes()
                for n, start in enumerate(range(0, len(moved), ROWS_BYTES)):
                    part = moved[start : start + ROWS_BYTES]
                    found.setdefault(partition, {})[f"{table}{SEP}{route}:{n}"] = part

    def per_route(table: str, rows: np.ndarray, shard: np.ndarray) -> None:
        """A table read per video: its rows by the shard they go to, as the video's records."""
        for route in np.unique(shard).tolist():
            partition = partition_of(route)
            if partition != home:
                moved = getattr(state, table).entry_of(rows[shard == route])[1]  # one video: place 0
                found.setdefault(partition, {})[f"{table}{SEP}{route}"] = moved

    # The first buckets (a viewer's route: its digest's first 32 bits).
    firsts = state.firsts.of_video(video)
    per_route("firsts", firsts, (firsts["digest"] >> np.uint64(32)) % np.uint64(shards))
    for key, history in state.reactions.items():
        if key.startswith(prefix):
            put("reactions", key, history, _route(key[len(prefix) :]))
    # The sessions watching (a left one stays: it counts nowhere).
    watching = state.sessions.watching_rows(video)
    per_route("sessions", watching, watching["route"] % shards)
    return found


def moved_sessions(moved: dict[int, dict[str, bytes]]) -> np.ndarray:
    """The sessions a hand-off moves, as `presence.RECORD`s."""
    head = "sessions" + SEP
    parts = [
        np.frombuffer(raw, RECORD)
        for entries in moved.values()
        for name, raw in entries.items()
        if name.startswith(head)
    ]
    return np.concatenate(parts) if parts else np.empty(0, RECORD)


def _route(viewer: str) -> int:
    return rules.viewer_route(rules.viewer_digest(viewer))


async def announce(client: aioredis.Redis, plans: dict[str, ShardPlan]) -> None:
    """Publish shard plans for the ingest API (set again after a restore: the same values)."""
    if plans:
        await client.hset(
            keys.shard_plans(), mapping={video: encode_shard_plan(plan) for video, plan in plans.items()}
        )


async def hand_off(client: aioredis.Redis, video: str, moved: dict[int, dict[str, bytes]]) -> None:
    """Write every partition's part of the hand-off, then mark it closed (a new owner of the home
    partition writes it all again: the same values)."""
    async with client.pipeline(transaction=False) as pipe:  # one round trip for every part
        for partition, entries in moved.items():
            items = list(entries.items())
            for start in range(0, len(items), CHUNK):
                pipe.hset(keys.handoff(video, partition), mapping=dict(items[start : start + CHUNK]))
        await pipe.execute()
    # Closed only once every part is written (on a cluster the parts lie on other nodes).
    await client.set(keys.handoff_closed(video), "1")


async def take_over(
    client: aioredis.Redis, videos: list[str], partition: int
) -> dict[str, dict[bytes, bytes]]:
    """The hand-offs for `partition` of those `videos` whose hand-off is closed (one round trip for
    the flags, one for the parts)."""
    async with client.pipeline(transaction=False) as pipe:
        for video in videos:
            pipe.exists(keys.handoff_closed(video))
        closed = [v for v, found in zip(videos, await pipe.execute(), strict=True) if found]
    if not closed:
        return {}
    async with client.pipeline(transaction=False) as pipe:
        for video in closed:
            pipe.hgetall(keys.handoff(video, partition))
        parts = await pipe.execute()
    return dict(zip(closed, parts, strict=True))
