"""The layout of the counter's writes: a partition plan (one atomic script call) and a micro-batch's
plans; the script's argument is built here (speed_layer/script.py documents its fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import cast

import msgspec

from counting import keys
from speed_layer import script
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record

# A video keeps an exact set of its viewers up to this many; then a HyperLogLog (within 2 %).
EXACT_VIEWERS_LIMIT = 10_000

_encoder = msgspec.msgpack.Encoder()
owner_key = keys.partition_owner


@lru_cache(maxsize=65_536)
def video_keys(video_id: str) -> tuple[str, str, str, str, str, str]:
    """(viewers, reactions, presence, bucket-counts key without the bucket number, buckets index,
    presence leaves) keys of a video: the script reaches a bucket outside the plan by number."""
    counts_prefix = keys.bucket_counts(video_id, 0).removesuffix("0")
    return (
        keys.viewers(video_id),
        keys.reactions(video_id),
        keys.presence(video_id),
        counts_prefix,
        keys.buckets_index(video_id),
        keys.presence_left(video_id),
    )


_TRENDING_PREFIX = keys.trending(0).removesuffix("0")
_PLATFORM_PREFIX = keys.platform(0).removesuffix("0")


@dataclass
class PartitionPlan:
    """One atomic write: the operations of consecutive records of one partition."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    generation: int = 0
    bucket_ms: int = 1
    now_ms: int = 0
    retention_ms: int = 0
    videos: list[list[object]] = field(default_factory=list)
    buckets: list[list[object]] = field(default_factory=list)
    shards: list[list[object]] = field(default_factory=list)
    markers: list[list[object]] = field(default_factory=list)
    # Per record: [offset, bucket of its events' ingestion time, events] (every type), for the
    # platform's `events` (the script adds those of records above the stored offset only).
    arrivals: list[list[int]] = field(default_factory=list)
    records: int = 0
    events: int = 0
    video_events: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        """The script's KEYS: the partition's stored offset and its owner generation."""
        return [keys.partition_offset(self.topic, self.partition), owner_key(self.topic, self.partition)]

    @property
    def ops(self) -> list[list[object]]:
        """Every operation of the plan, one list each, video after video (for tests and logs)."""
        found: list[list[object]] = []
        for video in self.videos:
            flat = cast(list[object], video[6])
            i = 0
            while i < len(flat):
                width = script.WIDTH[cast(int, flat[i])]
                found.append(flat[i : i + width])
                i += width
        return found

    def script_arg(self) -> bytes:
        """The plan as the script's ARGV[1]."""
        return _encoder.encode(
            [
                self.last_offset,
                self.generation,
                EXACT_VIEWERS_LIMIT,
                keys.videos_index(),
                self.videos,
                self.buckets,
                self.shards,
                self.markers,
                self.bucket_ms,
                _TRENDING_PREFIX,
                self.now_ms,
                self.retention_ms,
                _PLATFORM_PREFIX,
                self.arrivals,
            ]
        )


@dataclass
class CounterPlan:
    """Everything one micro-batch asks of Redis and of the dead-letter topic."""

    writes: list[PartitionPlan]
    dead_letters: list[tuple[Record, PoisonRecord]]
    hot: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(w.events for w in self.writes)

    @property
    def positions(self) -> list[tuple[str, int, int]]:
        """(topic, partition, last offset) of each write."""
        return [(w.topic, w.partition, w.last_offset) for w in self.writes]


# Forget the keys known to have an expiry past this many (forgetting only costs a PEXPIREAT again).
MAX_EXPIRING = 500_000


def remember_expiries(
    expiring: set[str], plan: PartitionPlan, buckets: list[int], sketches: list[int], markers: list[int]
) -> None:
    """After a write that committed: the keys it wrote now have their expiry (indexes from 1)."""
    if len(expiring) > MAX_EXPIRING:
        expiring.clear()
    for b in buckets:
        expiring.add(cast(str, plan.buckets[b - 1][0]))
    for b in sketches:
        expiring.add(cast(str, plan.buckets[b - 1][4]))
    for m in markers:
        expiring.add(cast(str, plan.markers[m - 1][0]))
