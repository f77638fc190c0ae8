"""The counter's pure part: turn a micro-batch of records into per-partition Redis write plans,
deciding every verdict with the rules of `counting/` (the Lua script only applies the plan).

Planning is the hot path; how it is kept cheap: docs/decisions/0001-exactly-once-via-redis.md.
"""

from __future__ import annotations

from collections import Counter

from counting import bots, keys, rules
from counting.event import MAX_AGE_MS, Event
from counting.settings import Settings
from speed_layer import script
from speed_layer.errors import PoisonRecord
from speed_layer.hot import HotVideos
from speed_layer.judge import QUALIFIED, SHORT, judge_view
from speed_layer.plan import (
    CounterPlan,
    PartitionPlan,
    video_keys,
)
from speed_layer.records import Record, by_partition, decode_record
from speed_layer.windows import ViewWindows

# A plan is cut at a record boundary once it holds this many events (each piece commits its own
# offset), so one script call stays short: docs/decisions/0001-exactly-once-via-redis.md.
MAX_EVENTS_PER_SCRIPT = 10_000
# Presence older than this behind the newest heartbeat of a video is dropped by the write.
PRESENCE_KEEP_MS = 10 * rules.PRESENCE_MS
# An event marker lives a day past the last moment an event it guards can still be accepted.
MARKER_HORIZON_MS = MAX_AGE_MS + rules.DAY_MS

_VIEW, _SHORT, _REJECT, _REACTION = script.VIEW, script.SHORT, script.REJECT, script.REACTION
_WINDOW_MS = rules.VIEW_WINDOW_MS
_REACTION_STATE = rules.REACTION_STATE
# The rules, bound once: the loop below runs them per event.
_bucket_of, _day_of, _window_of = rules.bucket_of, rules.day_of, rules.view_window_of


event_markers_key = keys.event_markers
window_viewers_key = keys.window_viewers


viewer_digest = rules.viewer_digest


class _Video:
    """The part of a plan about one video: its ops, heartbeats, buckets and marker hashes."""

    __slots__ = (
        "buckets",
        "days",
        "events",
        "keys",
        "leaves",
        "ops",
        "presence",
        "seen",
        "video_id",
        "windows",
    )

    def __init__(self, video_id: str) -> None:
        self.video_id = video_id
        self.keys = video_keys(video_id)
        self.ops: list[object] = []
        self.presence: dict[str, int] = {}
        self.leaves: dict[str, int] = {}
        self.buckets: dict[int, int] = {}
        self.days: dict[int, int] = {}
        self.windows: dict[int, int] = {}
        self.seen: set[str] = set()
        self.events = 0


class _PlanBuilder:
    """Accumulates the operations of one partition plan."""

    def __init__(
        self,
        topic: str,
        partition: int,
        first_offset: int,
        settings: Settings,
        now_ms: int,
        generation: int,
        trims: dict[str, int],
        expiring: set[str],
        bot_filter: bots.BotFilter,
    ) -> None:
        self._bots = bot_filter
        self.plan = PartitionPlan(
            topic,
            partition,
            first_offset,
            first_offset,
            generation,
            settings.bucket_ms,
            now_ms,
            settings.retention_ms,
        )
        self._expiring = expiring
        self._videos: dict[str, _Video] = {}
        self._bucket_ms = settings.bucket_ms
        self._retention_ms = settings.retention_ms
        self._now_ms = now_ms
        self._marker_floor = now_ms + rules.DAY_MS
        self._trims = trims

    def _bucket(self, video: _Video, bucket: int) -> int:
        index = len(self.plan.buckets) + 1
        expire_at = max(rules.bucket_start(bucket + 1, self._bucket_ms), self._now_ms) + self._retention_ms
        video_id = video.video_id
        counts = keys.bucket_counts(video_id, bucket)
        sketch = keys.viewers_sketch(video_id, bucket)
        known = self._expiring
        self.plan.buckets.append(
            [
                counts,
                keys.buckets_index(video_id),
                bucket,
                0 if counts in known else expire_at,
                sketch,
                keys.trending(bucket),
                video_id,
                video.keys[0],
                0 if sketch in known else expire_at,
                expire_at,
            ]
        )
        video.buckets[bucket] = index
        return index

    def _day(self, video: _Video, day: int) -> int:
        expire_at = max((day + 1) * rules.DAY_MS - 1 + MARKER_HORIZON_MS, self._marker_floor)
        key = event_markers_key(video.video_id, day)
        self.plan.markers.append([key, 0 if key in self._expiring else expire_at])
        index = video.days[day] = len(self.plan.markers)
        return index

    def _window(self, video: _Video, window: int) -> int:
        expire_at = max((window + 1) * _WINDOW_MS - 1 + MARKER_HORIZON_MS, self._marker_floor)
        key = window_viewers_key(video.video_id, window)
        self.plan.markers.append([key, 0 if key in self._expiring else expire_at])
        index = video.windows[window] = len(self.plan.markers)
        return index

    def add_record(self, offset: int, events: list[Event], windows: ViewWindows) -> None:
        """Plan the events of one record (the hot loop of the counter)."""
        videos = self._videos
        bucket_ms = self._bucket_ms
        rejected = self.plan.rejected
        bot_filter = self._bots
        stamped, stamp, short_mark, reaction_mark = -1, "", "", ""
        for event in events:
            video_id = event.video_id
            video = videos.get(video_id)
            if video is None:
                video = videos[video_id] = _Video(video_id)
            video.events += 1
            kind = event.type
            ingest_ts: int = event.ingest_ts  # type: ignore[assignment]  # decode_record checked it
            if ingest_ts != stamped:  # the markers' values (a record's events share one ingest_ts)
                stamped, stamp = ingest_ts, str(ingest_ts)
                short_mark, reaction_mark = stamp + "|s", stamp + "|a"
            if kind == "heartbeat" or kind == "leave":
                session = event.session_id
                latest = video.presence if kind == "heartbeat" else video.leaves
                if session is not None and ingest_ts > latest.get(session, -1):
                    latest[session] = ingest_ts
                continue
            ts = event.ts
            bucket = _bucket_of(ingest_ts, bucket_ms)
            b = video.buckets.get(bucket) or self._bucket(video, bucket)
            day = _day_of(ts)
            m = video.days.get(day) or self._day(video, day)
            event_id = event.event_id
            ops = video.ops
            if kind == "view":
                viewer = rules.viewer_of(event)
                first_copy = event_id not in video.seen
                video.seen.add(event_id)
                verdict = judge_view(event, viewer, first_copy, windows, bot_filter)
                if verdict == SHORT:
                    ops.extend((_SHORT, offset, m, event_id, b, short_mark))
                    continue
                if verdict != QUALIFIED:  # the rejection field of the bot rules
                    ops.extend((_REJECT, offset, m, event_id, b, f"{stamp}|{verdict}", verdict))
                    rejected[verdict] = rejected.get(verdict, 0) + 1
                    continue
                window = _window_of(ts)
                w = video.windows.get(window) or self._window(video, window)
                ops.extend((_VIEW, offset, m, event_id, b, stamp, w, viewer, viewer_digest(viewer)))
            else:
                state = _REACTION_STATE.get(kind)
                user_id = event.user_id
                if state is None or user_id is None:
                    continue
                ops.extend((_REACTION, offset, m, event_id, b, reaction_mark, user_id, ts, state))
        self.plan.records += 1
        self.plan.events += len(events)
        if events:
            last = _bucket_of(stamped, bucket_ms)
            if _bucket_of(events[0].ingest_ts or 0, bucket_ms) == last:  # one request's record: one stamp
                self.plan.arrivals.append([offset, last, len(events)])
            else:
                spread = Counter(_bucket_of(e.ingest_ts or 0, bucket_ms) for e in events)
                self.plan.arrivals.extend([offset, bucket, n] for bucket, n in sorted(spread.items()))

    @property
    def events(self) -> int:
        return self.plan.events

    def finish(self, last_offset: int) -> PartitionPlan:
        plan = self.plan
        plan.last_offset = last_offset
        plan.video_events = {video_id: video.events for video_id, video in self._videos.items()}
        for video_id in sorted(self._videos):
            video = self._videos[video_id]
            viewers, reactions, presence, prefix, index, left = video.keys
            beats: list[object] = []
            newest = 0
            for session, ingest_ts in video.presence.items():
                beats.append(str(ingest_ts))  # text: the script passes it on as is
                beats.append(session)
                if ingest_ts > newest:
                    newest = ingest_ts
            leaves: list[object] = []
            for session, ingest_ts in video.leaves.items():
                leaves.append(str(ingest_ts))
                leaves.append(session)
            trim_below = 0
            if newest and newest - self._trims.get(video_id, 0) >= rules.PRESENCE_MS:
                trim_below = newest - PRESENCE_KEEP_MS
                self._trims[video_id] = newest
            plan.videos.append(
                [
                    video_id,
                    viewers,
                    reactions,
                    presence,
                    trim_below,
                    beats,
                    video.ops,
                    prefix,
                    index,
                    left,
                    leaves,
                ]
            )
        return plan


def plan_batch(
    records: list[Record],
    settings: Settings,
    windows: ViewWindows,
    now_ms: int,
    max_events: int = MAX_EVENTS_PER_SCRIPT,
    hot: HotVideos | None = None,
    generations: dict[tuple[str, int], int] | None = None,
    trims: dict[str, int] | None = None,
    expiring: set[str] | None = None,
    bot_filter: bots.BotFilter | None = None,
) -> CounterPlan:
    """Plan the Redis writes of a micro-batch: one plan per partition (more when it is large), each
    covering every record of its offset range; records that cannot be decoded become dead letters.
    With `hot`, videos whose velocity passed the threshold get their shard count raised;
    `generations` are the owner generations of the partitions this worker was assigned; `trims`
    remembers when each video's presence was last trimmed (at most once a minute); `expiring` holds
    the keys this worker already gave an expiry (see `remember_expiries`); `bot_filter` judges the
    views (the rules of the settings' file)."""
    trims = {} if trims is None else trims
    bot_filter = bot_filter or bots.shipped()
    expiring = set() if expiring is None else expiring
    writes: list[PartitionPlan] = []
    dead_letters: list[tuple[Record, PoisonRecord]] = []
    newest_ingest = 0
    for (topic, partition), group in by_partition(records).items():
        generation = (generations or {}).get((topic, partition), 0)
        builder: _PlanBuilder | None = None
        for record in group:
            if builder is None:
                builder = _PlanBuilder(
                    topic, partition, record.offset, settings, now_ms, generation, trims, expiring, bot_filter
                )
            try:
                events = decode_record(record.value)
            except PoisonRecord as exc:
                dead_letters.append((record, exc))
                events = []
            builder.add_record(record.offset, events, windows)
            if events and (events[-1].ingest_ts or 0) > newest_ingest:
                newest_ingest = events[-1].ingest_ts or 0
            if builder.events >= max_events:
                writes.append(builder.finish(record.offset))
                builder = None
        if builder is not None:
            writes.append(builder.finish(group[-1].offset))
    raised: dict[str, int] = {}
    if hot is not None and newest_ingest:
        per_video: dict[str, int] = {}
        for write in writes:
            for video_id, n in write.video_events.items():
                per_video[video_id] = per_video.get(video_id, 0) + n
        raised = hot.observe(per_video, newest_ingest, now_ms)
        _attach_shards(writes, raised, hot)
    return CounterPlan(writes, dead_letters, raised)


def _attach_shards(writes: list[PartitionPlan], wanted: dict[str, int], hot: HotVideos) -> None:
    """Put each shard-count update in the last write of the batch (one write is enough: the script
    only ever raises the count)."""
    if not writes or not wanted:
        return
    writes[-1].shards.extend(
        [keys.shards(video), count, hot.ttl_ms] for video, count in sorted(wanted.items())
    )
