"""The Redis key layout. Every key of one video carries the hash tag `{video_id}` so that one
atomic write touching a video stays in one Redis Cluster slot."""

from __future__ import annotations

PREFIX = "tally"


def video_tag(video_id: str) -> str:
    return "{" + video_id + "}"


def bucket_counts(video_id: str, bucket: int) -> str:
    """Hash of per-bucket deltas of a video: views, likes, dislikes, uniques, rejected:<reason>."""
    return f"{PREFIX}:{video_tag(video_id)}:b:{bucket}"


def buckets_index(video_id: str) -> str:
    """Sorted set of the buckets a video has deltas in (member and score: the bucket number)."""
    return f"{PREFIX}:{video_tag(video_id)}:buckets"


def event_markers(video_id: str, day: int) -> str:
    """Hash event_id -> `ingest_ts[|what]` of the applied copy of a video's events whose event time
    falls in `day`: a retry (same id, same ts) finds its id there."""
    return f"{PREFIX}:{video_tag(video_id)}:e:{day}"


def window_viewers(video_id: str, window: int) -> str:
    """Hash viewer -> `ingest_ts|event_id` of the counted view of each viewer of a video in a
    30-minute window."""
    return f"{PREFIX}:{video_tag(video_id)}:w:{window}"


def viewers(video_id: str) -> str:
    """The viewers counted for a video: a hash of viewer digests to the first bucket each counted in
    below the exact limit, then a HyperLogLog of them."""
    return f"{PREFIX}:{video_tag(video_id)}:viewers"


def reactions(video_id: str) -> str:
    """Hash user_id -> the reactions that decide the user's state in some bucket, as the counter
    keeps them (`values.decode_history`; written by `speed_layer/write.lua`)."""
    return f"{PREFIX}:{video_tag(video_id)}:reactions"


def user_reactions(video_id: str) -> str:
    """Hash user_id -> the latest reaction the ingest API acknowledged (`values.encode_acknowledged`):
    with `reactions`, what `user_liked` reads, consistent with every acknowledged write."""
    return f"{PREFIX}:{video_tag(video_id)}:user-reactions"


def presence(video_id: str) -> str:
    """Sorted set session_id -> time of its last heartbeat (ms): the Redis-state counter's presence."""
    return f"{PREFIX}:{video_tag(video_id)}:presence"


def watching(video_id: str) -> str:
    """Hash partition -> msgpack [second, sessions, second, sessions, ...] (newest second first): per
    second of ingestion time, the sessions of that partition whose newest heartbeat lies in it and
    that have not left since; the state counter's presence (readers sum it with `presence`)."""
    return f"{PREFIX}:{video_tag(video_id)}:watching"


def presence_left(video_id: str) -> str:
    """Sorted set session_id -> time (ms) of its last `leave`: a heartbeat ingested no later is
    not watching any more, whatever order the counter applies them in."""
    return f"{PREFIX}:{video_tag(video_id)}:presence-left"


def partition_offset(topic: str, partition: int) -> str:
    """The last offset of a partition whose increments are in Redis (exactly-once bookkeeping)."""
    return f"{PREFIX}:offsets:{topic}:{partition}"


def partition_owner(topic: str, partition: int) -> str:
    """The generation of the counter that owns a partition now (raised on every assignment)."""
    return f"{PREFIX}:offsets:{topic}:{partition}:owner"


def counter_offset(topic: str, partition: int, counter_state: str = "redis") -> str:
    """Where the counter keeps the last offset of a partition whose counts the read keys hold, by
    where it keeps its state (`Settings.counter_state`): the state counter commits a batch before it
    writes the batch's counts, so its served offset (`sunk`) follows the committed one."""
    if counter_state == "worker":
        return partition_state(topic, partition, "sunk")
    return partition_offset(topic, partition)


def counter_owner(topic: str, partition: int, counter_state: str = "redis") -> str:
    """Where the counter keeps the owner generation of a partition (`counter_offset`'s twin)."""
    if counter_state == "worker":
        return partition_state(topic, partition, "owner")
    return partition_owner(topic, partition)


def archiver_watermark() -> str:
    """The ingestion time (ms) below which every event is durably in the Parquet log."""
    return f"{PREFIX}:archiver:watermark"


def archiver_position(topic: str, partition: int) -> str:
    """Next offset of a partition that is durably in the Parquet log (archivers only raise it)."""
    return f"{PREFIX}:archiver:position:{topic}:{partition}"


TRENDING_TAG = "{trending}"


def trending(bucket: int) -> str:
    """Sorted set video_id -> counted views in one bucket. It spans videos; every bucket's set
    shares the tag `{trending}`, so a union over buckets stays in one Redis Cluster slot."""
    return f"{PREFIX}:{TRENDING_TAG}:{bucket}"


def trending_scratch(name: str) -> str:
    """A short-lived union of trending buckets, in their slot."""
    return f"{PREFIX}:{TRENDING_TAG}:tmp:{name}"


def reach_scratch(name: str, part: str) -> str:
    """Short-lived copies of viewer sketches of several videos, under one tag of their own (`name`)
    so that one PFCOUNT reaches them all on a Redis Cluster."""
    return f"{PREFIX}:{{reach:{name}}}:{part}"


PLATFORM_TAG = "{platform}"


def platform(bucket: int) -> str:
    """Hash of one bucket's counts over every video (the sum of the videos' bucket hashes: views,
    rejected:<reason>, ...), for the platform overview. Every bucket's hash shares the tag
    `{platform}` with its partitions' parts (`platform_parts`)."""
    return f"{PREFIX}:{PLATFORM_TAG}:{bucket}"


def platform_parts(bucket: int) -> str:
    """Hash partition -> that partition's part of `platform(bucket)` (`values.encode_part`)."""
    return f"{PREFIX}:{PLATFORM_TAG}:parts:{bucket}"


def bucket_parts(video_id: str, bucket: int) -> str:
    """Hash partition -> that partition's part of `bucket_counts(video_id, bucket)`: the absolute
    values its counter wrote and the offset they are as of (`values.encode_part`)."""
    return f"{PREFIX}:{video_tag(video_id)}:bp:{bucket}"


def partition_tag(topic: str, partition: int) -> str:
    return "{p:" + f"{topic}:{partition}" + "}"


def partition_state(topic: str, partition: int, part: str) -> str:
    """A key of a partition's counter state, all sharing the partition's hash tag: `offset` (the last
    offset committed), `sunk` (the last offset whose counts reached the read keys), `owner` (the
    generation of the worker that owns it), `log` (the changelog: a list of entries from the
    snapshot's first batch on), `chunks` (the snapshot: a list of chunks), `chunks:next` and
    `chunks:mark` (a snapshot being built, `speed_layer/snapshot.py`) and `snapshot` (the whole
    snapshot an earlier version wrote, read until the first build replaces it)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:{part}"


def viewers_sketch(video_id: str, bucket: int) -> str:
    """HyperLogLog of the viewers counted for a video in one bucket."""
    return f"{PREFIX}:{video_tag(video_id)}:hll:{bucket}"


def shards(video_id: str) -> str:
    """The shard plan of a hot video (`values.ShardPlan`; absent: 1 shard). The Redis-state counter
    keeps a bare count that only grows while the video is hot; the state counter sets a plan once."""
    return f"{PREFIX}:{video_tag(video_id)}:shards"


def handoff(video_id: str, partition: int) -> str:
    """Hash `table SEP key` -> value: the state of a hot video's viewers that its shard plan moves to
    `partition`, written by the counter of the video's home partition (`speed_layer.handoff`)."""
    return f"{PREFIX}:{video_tag(video_id)}:handoff:{partition}"


def handoff_closed(video_id: str) -> str:
    """Set once the home partition's counter has written every hand-off of a video."""
    return f"{PREFIX}:{video_tag(video_id)}:handoff-closed"


def rate_window(scope: str, subject: str) -> str:
    """Sorted set of the recent requests of one address or user (a sliding rate window)."""
    return f"{PREFIX}:rate:{scope}:{{{subject}}}"


def videos_index() -> str:
    """Set of every video the speed layer has seen."""
    return f"{PREFIX}:videos"


def region_peers() -> str:
    """Hash of each peer region -> JSON of the replicator's state for it: when it last read the
    peer's components topic to its end (`in_sync_at`, ms) and its last error (decision 0006)."""
    return f"{PREFIX}:regions"
