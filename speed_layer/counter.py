"""The counter's pure part: turn a micro-batch of records into per-partition Redis write plans,
deciding every verdict with the rules of `counting/` (the Lua script only applies the plan)."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from counting import bots, keys, rules
from counting.event import MAX_AGE_MS, Event
from counting.settings import Settings
from speed_layer import script
from speed_layer.errors import PoisonRecord
from speed_layer.records import Record, by_partition, decode_record
from speed_layer.windows import ViewWindows

# One script call stays short (Redis runs nothing else meanwhile): a plan is cut at a record
# boundary once it holds this many operations; each piece commits its own offset.
MAX_OPS_PER_SCRIPT = 20_000
# Presence older than this behind the newest heartbeat of a video is dropped by the write.
PRESENCE_KEEP_MS = 10 * rules.PRESENCE_MS

_encoder = msgspec.msgpack.Encoder()


@dataclass
class PartitionPlan:
    """One atomic write: the operations of consecutive records of one partition, and its KEYS."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    keys: list[str]
    ops: list[list[object]] = field(default_factory=list)
    buckets: list[list[object]] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    presence_trims: list[list[object]] = field(default_factory=list)
    records: int = 0
    events: int = 0

    def script_arg(self) -> bytes:
        """The plan as the script's ARGV[1]."""
        videos_index = self.keys.index(keys.videos_index()) + 1 if self.videos else 0
        return _encoder.encode(
            [self.last_offset, self.ops, self.buckets, videos_index, self.videos, self.presence_trims]
        )


@dataclass
class CounterPlan:
    """Everything one micro-batch asks of Redis and of the dead-letter topic."""

    writes: list[PartitionPlan]
    dead_letters: list[tuple[Record, PoisonRecord]]

    @property
    def events(self) -> int:
        return sum(w.events for w in self.writes)


class _PlanBuilder:
    """Accumulates the operations of one partition plan; keys are numbered as the script's KEYS."""

    def __init__(
        self, topic: str, partition: int, first_offset: int, settings: Settings, now_ms: int
    ) -> None:
        self.plan = PartitionPlan(
            topic, partition, first_offset, first_offset, [keys.partition_offset(topic, partition)]
        )
        self._index: dict[str, int] = {self.plan.keys[0]: 1}
        self._buckets: dict[str, tuple[str, int]] = {}
        self._videos: set[str] = set()
        self._presence: dict[str, int] = {}
        self._bucket_ms = settings.bucket_ms
        self._retention_ms = settings.retention_ms
        self._now_ms = now_ms

    def key(self, name: str) -> int:
        index = self._index.get(name)
        if index is None:
            self.plan.keys.append(name)
            index = self._index[name] = len(self.plan.keys)
        return index

    def bucket_key(self, event: Event) -> int:
        assert event.ingest_ts is not None
        bucket = rules.bucket_of(event.ingest_ts, self._bucket_ms)
        name = keys.bucket_counts(event.video_id, bucket)
        if name not in self._buckets:
            self._buckets[name] = (event.video_id, bucket)
        return self.key(name)

    def expire_at(self, last_acceptable_ts: int) -> str:
        """A marker's expiry: a day after the last moment an event it guards can still be accepted."""
        return str(max(last_acceptable_ts + MAX_AGE_MS + rules.DAY_MS, self._now_ms + rules.DAY_MS))

    def add(self, offset: int, event: Event, windows: ViewWindows, first_copy: bool) -> None:
        self._videos.add(event.video_id)
        self.plan.events += 1
        if event.type == "heartbeat":
            self._heartbeat(offset, event)
            return
        marker = self.key(keys.event_marker(event.video_id, event.event_id))
        head: list[object] = [offset, 0, marker, self.expire_at(event.ts), self.bucket_key(event)]
        if event.type == "view":
            address_views, viewer_views = windows.observe(event, count=first_copy)
            if not rules.is_qualified_view(event):
                head[1] = script.SHORT
                self.plan.ops.append(head)
                return
            reason = bots.rejection_reason(bots.signals(event, address_views, viewer_views))
            if reason is not None:
                head[1] = script.REJECT
                self.plan.ops.append([*head, f"rejected:{reason}"])
                return
            viewer = rules.viewer_of(event)
            window = rules.view_window_of(event.ts)
            window_marker = self.key(keys.window_marker(event.video_id, viewer, window))
            window_expire = self.expire_at((window + 1) * rules.VIEW_WINDOW_MS - 1)
            head[1] = script.VIEW
            self.plan.ops.append(
                [*head, window_marker, window_expire, self.key(keys.viewers(event.video_id)), viewer]
            )
        elif event.type in rules.REACTION_STATE and event.user_id is not None:
            head[1] = script.REACTION
            self.plan.ops.append(
                [
                    *head,
                    self.key(keys.reactions(event.video_id)),
                    event.user_id,
                    str(event.ts),
                    event.event_id,
                    rules.reaction_state(event.type),
                ]
            )

    def _heartbeat(self, offset: int, event: Event) -> None:
        if event.session_id is None or event.ingest_ts is None:
            return
        presence = keys.presence(event.video_id)
        self.plan.ops.append(
            [offset, script.HEARTBEAT, self.key(presence), event.session_id, str(event.ingest_ts)]
        )
        self._presence[presence] = max(self._presence.get(presence, 0), event.ingest_ts)

    def finish(self, last_offset: int) -> PartitionPlan:
        plan = self.plan
        plan.last_offset = last_offset
        for name, (video_id, bucket) in self._buckets.items():
            expire_at = max((bucket + 1) * self._bucket_ms, self._now_ms) + self._retention_ms
            plan.buckets.append(
                [self.key(name), self.key(keys.buckets_index(video_id)), str(bucket), str(expire_at)]
            )
        plan.videos = sorted(self._videos)
        if plan.videos:
            self.key(keys.videos_index())
        plan.presence_trims = [
            [self.key(name), str(newest - PRESENCE_KEEP_MS)] for name, newest in self._presence.items()
        ]
        return plan


def plan_batch(
    records: list[Record],
    settings: Settings,
    windows: ViewWindows,
    now_ms: int,
    max_ops: int = MAX_OPS_PER_SCRIPT,
) -> CounterPlan:
    """Plan the Redis writes of a micro-batch: one plan per partition (more when it is large), each
    covering every record of its offset range; records that cannot be decoded become dead letters."""
    writes: list[PartitionPlan] = []
    dead_letters: list[tuple[Record, PoisonRecord]] = []
    seen: set[tuple[str, str]] = set()
    for (topic, partition), group in by_partition(records).items():
        builder: _PlanBuilder | None = None
        for record in group:
            if builder is None:
                builder = _PlanBuilder(topic, partition, record.offset, settings, now_ms)
            builder.plan.records += 1
            try:
                events = decode_record(record.value)
            except PoisonRecord as exc:
                dead_letters.append((record, exc))
                events = []
            for event in events:
                identity = (event.video_id, event.event_id)
                builder.add(record.offset, event, windows, first_copy=identity not in seen)
                seen.add(identity)
            if len(builder.plan.ops) >= max_ops:
                writes.append(builder.finish(record.offset))
                builder = None
        if builder is not None:
            writes.append(builder.finish(group[-1].offset))
    return CounterPlan(writes, dead_letters)
