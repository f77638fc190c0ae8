"""A region's side of the exchange (decision 0006): the components of an entry the state counter
committed, and other regions' components applied through the sink, each remote partition as a
part of its own beside the local ones (`counting.regions.part_name`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis

from counting.regions import PLATFORM, Component, Exchange, merge, served_fields
from counting.settings import Settings
from speed_layer.sink.sink import plan_sink, sink
from speed_layer.state.firsts import as_entry, viewers_in
from speed_layer.state.partition import SEP, PartitionState
from speed_layer.state.per_video import NO_ROWS

# Where the state counter hands what each entry it sank changed (None: one region).
Publish = Callable[[Exchange], Awaitable[None]]


def components_of(
    entry: Mapping[str, Any], state: PartitionState, region: str, topic: str, partition: int
) -> list[Component]:
    """The components of a committed entry: each (video, bucket) whose counts or sketches it
    changed, with the partition's absolute counts there, and each platform bucket it changed."""
    offset = int(entry["offset"])
    counts: Mapping[str, Any] = entry.get("counts") or {}
    sketches: Mapping[str, Any] = entry.get("sketches") or {}
    firsts: dict[str, list[str]] = {}
    for video, digest, first in viewers_in(entry.get("firsts") or NO_ROWS):
        firsts.setdefault(f"{video}{SEP}{first}", []).append(digest)
    found = []
    for key in sorted(set(counts) | set(sketches) | set(firsts)):
        video, _, bucket = key.rpartition(SEP)
        fields = counts[key] if key in counts else state.counts.get(key)
        digests = sorted(set(sketches.get(key) or []))
        b = int(bucket)
        first_here = sorted(firsts.get(key, []))
        found.append(
            Component(region, topic, partition, video, b, offset, dict(fields or {}), digests, first_here)
        )
    for bucket, fields in (entry.get("platform") or {}).items():
        found.append(Component(region, topic, partition, PLATFORM, int(bucket), offset, dict(fields or {})))
    return found


async def apply_components(
    client: aioredis.Redis, settings: Settings, components: Iterable[Component], now_ms: int
) -> int:
    """Add other regions' components to this region's read keys; answer how many distinct parts
    were written. Older components than those applied before change nothing (the sink keeps each
    part as of its offset), so a batch may hold repeats, old ones and any order."""
    newest = merge({}, (c for c in components if c.region != settings.region))
    entries: dict[tuple[str, int], dict[str, Any]] = {}
    firsts: dict[tuple[str, int], list[tuple[str, str, int]]] = {}  # per entry
    for c in newest.values():
        entry = entries.get((c.part, c.offset))
        if entry is None:
            tables = ("counts", "sketches", "platform", "firsts")
            entry = entries[(c.part, c.offset)] = {"offset": c.offset, **{t: {} for t in tables}}
        if c.video_id == PLATFORM:
            entry["platform"][c.bucket] = served_fields(c)
            continue
        key = f"{c.video_id}{SEP}{c.bucket}"
        entry["counts"][key] = served_fields(c)
        if c.sketches:
            entry["sketches"][key] = c.sketches
        # The sink keeps each viewer's earliest first bucket of any region.
        firsts.setdefault((c.part, c.offset), []).extend(
            (c.video_id, digest, c.bucket) for digest in c.firsts
        )
    for at, found in firsts.items():
        entries[at]["firsts"] = as_entry(found)
    nobody = PartitionState(settings.bucket_ms, settings.retention_ms, settings.retry_horizon_ms)
    for (part, _), entry in sorted(entries.items()):
        plan = plan_sink(entry, nobody, part, now_ms, settings.retention_ms, True, settings.redis_cluster)
        await sink(client, plan)
    return len(newest)
