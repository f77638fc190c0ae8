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


def viewers(video_id: str) -> str:
    """The viewers counted for a video: a hash of viewer digests to the first bucket each counted in
    below the exact limit, then a HyperLogLog of them."""
    return f"{PREFIX}:{video_tag(video_id)}:viewers"


def reactions(video_id: str) -> str:
    """Hash user_id -> the reactions that decide the user's state in some bucket, as the counter
    keeps them (`values.decode_history`; written by `speed_layer/sink/sink.py`)."""
    return f"{PREFIX}:{video_tag(video_id)}:reactions"


def user_reactions(video_id: str) -> str:
    """Hash user_id -> the latest reaction the ingest API acknowledged (`values.encode_acknowledged`):
    with `reactions`, what `user_liked` reads, consistent with every acknowledged write."""
    return f"{PREFIX}:{video_tag(video_id)}:user-reactions"


def watching(video_id: str) -> str:
    """Hash partition -> msgpack [second, sessions, second, sessions, ...] (newest second first): per
    second of ingestion time, the sessions of that partition whose newest heartbeat lies in it and
    that have not left since (readers sum the partitions' parts)."""
    return f"{PREFIX}:{video_tag(video_id)}:watching"


def counter_offset(topic: str, partition: int) -> str:
    """The last offset of a partition whose counts the read keys hold (`partition_state`'s `sunk`):
    the counter commits a batch before it writes the batch's counts, so it follows the committed one."""
    return partition_state(topic, partition, "sunk")


def counter_owner(topic: str, partition: int) -> str:
    """The owner generation of a partition (`partition_state`'s `owner`)."""
    return partition_state(topic, partition, "owner")


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
    `chunks:mark` (a snapshot being built, `speed_layer/state/snapshot.py`) and `snapshot` (the whole
    snapshot an earlier version wrote, read until the first build replaces it)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:{part}"


def viewers_sketch(video_id: str, bucket: int) -> str:
    """HyperLogLog of the viewers counted for a video in one bucket."""
    return f"{PREFIX}:{video_tag(video_id)}:hll:{bucket}"


def shard_plans() -> str:
    """The hot videos' shard plans, a hash: video -> `values.ShardPlan` (a video left out has 1 shard),
    each set once by the counter of the video's home partition. Every ingest process reads it whole
    (`ingest.publisher.ShardPlans`): one read a second serves every video."""
    return f"{PREFIX}:shard-plans"


def handoff(video_id: str, partition: int) -> str:
    """Hash `table SEP key` -> value: the state of a hot video's viewers that its shard plan moves to
    `partition`, written by the counter of the video's home partition (`speed_layer.counter.handoff`)."""
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
