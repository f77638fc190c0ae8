"""One partition's counting state, kept in the counter worker's memory (docs/design.md, "Speed layer"),
and the counting rules of `counting/` run on it, event by event, in offset order.

Every table holds absolute values, and each micro-batch records which entries it changed: the
changelog entry (`delta`) is those entries' new values, so restoring is upserting entries in order,
and the counts reach Redis as this partition's absolute values per video and bucket (a replay
rewrites the same ones). Tables (keyed by text, `video SEP ...`, but the markers and windows):

- seen: the markers of the applied copies within the retry horizon (`speed_layer/state/seen.py`: rows
  keyed by a fingerprint of video and event id, holding the copy's ingest time, verdict and viewer
  route, which tells where a hot video's plan sends the viewer; in a changelog entry, `ROW` bytes);
- windows: the counted view of each viewer's window (`speed_layer/state/counted_views.py`: rows keyed by
  a fingerprint of video, viewer and window, holding the view's ingest time, its event's marker
  fingerprint, its viewer's route and its video's tag; in a changelog entry, `WINDOW` bytes);
- firsts: the first bucket each viewer of a video was counted in (`speed_layer/state/firsts.py`: rows
  keyed by a fingerprint of video and viewer digest; exact up to `EXACT_VIEWERS_LIMIT` viewers of a
  video in this partition, then only the sketch grows; in a changelog entry, per video, `RECORD`
  bytes);
- reactions: video SEP user -> the reactions that decide the pair's state in some bucket;
- counts: video SEP bucket -> {field: value}; platform: bucket -> {field: value};
- sessions: each session's newest heartbeat and newest leave (`speed_layer/state/presence.py`: rows
  keyed by a fingerprint of video and session, holding both ingest times and the session's route,
  which tells where a hot video's plan sends it; in a changelog entry, per video, `RECORD` bytes);
- plans: video -> [shards, active_from, closed] of the hot videos this partition is the home of;
- imported: video -> 1 once this partition took over its viewers' state from the video's home
  (`speed_layer/counter/handoff.py`); pending: video -> the encoded events that wait for it.

Derived from the sessions (not in the changelog): `watching`, per video, the sessions watching
by second of their newest heartbeat (`rules.presence_second`), what reaches Redis (`keys.watching`).

Any order of the records within the partition gives the same state: an earlier copy of an applied
event, or an earlier view of a counted viewer's window, takes the place of the later one and moves
its outcome to its own bucket, as the oracle's first-copy order says. Of a window's views ingested
at the same time, the one counted is the first by its marker's fingerprint where the oracle takes the
first by event id: the same bucket either way, so the same counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import msgspec
import numpy as np

from counting import rules
from counting.event import Event
from counting.wire import decode_events, encode_events
from speed_layer.counter.judge import FLAGGED, QUALIFIED, REACTION, SHORT, VERDICT_CODE
from speed_layer.state.counted_views import WINDOW, Counted, window_key
from speed_layer.state.firsts import FirstsTable, first_key
from speed_layer.state.per_video import Videos
from speed_layer.state.presence import NONE, PresenceTable, session_key
from speed_layer.state.presence import RECORD as PRESENCE_RECORD
from speed_layer.state.rows import RowTable
from speed_layer.state.seen import Marker, SeenTable, fingerprint, video_tag

SEP = "\x1f"
# A video keeps an exact set of its viewers up to this many a partition; then only its HyperLogLog
# (within 2 %).
EXACT_VIEWERS_LIMIT = 10_000
# Presence older than this behind the newest heartbeat of a partition is dropped.
PRESENCE_KEEP_MS = 10 * rules.PRESENCE_MS
TABLES = (
    "seen",
    "windows",
    "firsts",
    "reactions",
    "counts",
    "platform",
    "sessions",
    "plans",
    "imported",
    "pending",
)
# A pair keeps at most this many deciding reactions (older ones fold into the first kept).
MAX_REACTIONS = 64

_bucket_of = rules.bucket_of
_presence_second = rules.presence_second
_route_of = rules.route_of
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
_LIKED, _DISLIKED = rules.LIKED, rules.DISLIKED
_FLAGGED_CODE = VERDICT_CODE[FLAGGED]
# The tables of fixed-width rows: in a changelog entry, a snapshot or a hand-off, their records' bytes
# (the first buckets and the sessions: per video).
ROW_TABLES = ("seen", "windows", "firsts", "sessions")
# A deciding reaction of a pair: (ts, event_id, state, bucket it was ingested in).
Reaction = tuple[int, str, str, int]


class Entry(TypedDict):
    """A changelog entry's (or a snapshot's) layout, as `delta` and `snapshot` make it and restoring
    decodes it (markers and windows straight into the tuples the tables keep); None: dropped."""

    offset: int
    newest: int
    seen: bytes  # `seen.ROW` records
    windows: bytes  # `counted_views.WINDOW` records
    firsts: Videos  # `firsts.RECORD` records
    reactions: dict[str, tuple[Reaction, ...] | None]
    counts: dict[str, dict[str, int] | None]
    platform: dict[str, dict[str, int] | None]
    sessions: Videos  # `presence.RECORD` records
    plans: dict[str, list[int] | None]
    imported: dict[str, int | None]
    pending: dict[str, list[bytes] | None]
    sketches: NotRequired[dict[str, list[str]]]  # stored beside the changelog, for its last entry only
    forward: NotRequired[list[Any]]


@dataclass
class Changes:
    """The entries one micro-batch changed, by table, and the viewer digests it counted per video and
    bucket (for the bucket sketches)."""

    keys: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in TABLES})
    sketches: dict[str, list[str]] = field(default_factory=dict)
    forward: list[Event] = field(default_factory=list)  # this region's reactions, for the others


class PartitionState:
    """The state of one partition; `count` applies an event, `delta` hands over what changed."""

    def __init__(self, bucket_ms: int, retention_ms: int, horizon_ms: int) -> None:
        self.bucket_ms = bucket_ms
        self.horizon_ms = horizon_ms
        self.keep_buckets = retention_ms // bucket_ms + 1
        self.offset = -1
        self.newest_ingest = 0
        # Markers and windows are rows of numpy columns (no Python object per event); the other
        # tables' values are tuples of numbers and text where they can be: the collector stops
        # tracking such a tuple once it has seen it, where millions of lists would be scanned at
        # every full collection.
        self.seen = SeenTable(horizon_ms)
        self.windows = RowTable(WINDOW, horizon_ms)
        self.firsts = FirstsTable()
        self.reactions: dict[str, tuple[Reaction, ...]] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.platform: dict[str, dict[str, int]] = {}
        self.sessions = PresenceTable()
        # Derived from the sessions: per video, second -> sessions watching; None once a restore
        # loaded entries (made again on first use).
        self._watching: dict[str, dict[int, int]] | None = {}
        self.plans: dict[str, list[int]] = {}
        self.imported: dict[str, int] = {}
        self.pending: dict[str, list[bytes]] = {}
        self.viewers_of = self.firsts.viewers_of  # video -> its exact viewers in `firsts`
        # Within a micro-batch the platform's buckets are not touched per event: the events that
        # arrived per bucket, and each changed video bucket's counts before the batch, are carried
        # to them once (`_settle`, before any `delta` or `snapshot`).
        self._arrived: dict[int, int] = {}
        self._counts_before: dict[str, dict[str, int]] = {}
        self.changes = Changes()
        self._bind_changes()

    def _bind_changes(self) -> None:
        """The change sets written per event, bound once per micro-batch."""
        tables = self.changes.keys
        self._changed_counts = tables["counts"]

    @property
    def changed(self) -> bool:
        """Whether anything changed since the last `delta`."""
        changes = self.changes
        return (
            any(changes.keys.values())
            or self.seen.changed
            or self.windows.changed
            or self.firsts.changed
            or self.sessions.changed
            or bool(changes.sketches or changes.forward or self._arrived)
        )

    # -- applying events -------------------------------------------------------------------------

    def arrive(self, ingest_ts: int, here: bool = True) -> None:
        """An event of any type reached the partition: the platform's `events` of its bucket (one
        accepted in another region is counted there: `here` False)."""
        if ingest_ts > self.newest_ingest:
            self.newest_ingest = ingest_ts
        if here:
            bucket = _bucket_of(ingest_ts, self.bucket_ms)
            self._arrived[bucket] = self._arrived.get(bucket, 0) + 1

    def forward(self, event: Event) -> None:
        """A reaction accepted in this region, for the other regions (with the next entry)."""
        self.changes.forward.append(event)

    def is_first_copy(self, fp: int) -> bool:
        """Whether no copy of the event (its `seen.fingerprint`) was applied within the horizon."""
        return self.seen.get(fp) is None

    def presence(self, event: Event, key: int | None = None) -> None:
        """A heartbeat or a leave (`key`: its session's `presence.session_key`, made here if not
        given): the newest of each per session, and the video's sessions watching by second
        (`rules.is_watching`: a session watches from its newest heartbeat on, unless a leave
        ingested no earlier came)."""
        ingest_ts = event.ingest_ts
        if event.session_id is None or ingest_ts is None:
            return
        video = event.video_id
        if key is None:
            key = session_key(video, event.session_id)
        sessions = self.sessions
        held = sessions.get(key)
        beat, left = (NONE, NONE) if held is None else (held[0], held[1])
        if event.type == "heartbeat":  # `_set_beat` inlined: a quarter of the events are heartbeats
            if ingest_ts <= beat:
                return
            seconds = self._watching.get(video) if self._watching is not None else None
            if seconds is None:
                seconds = self.watching_of(video)
            if beat != NONE and left < beat:
                second = _presence_second(beat)
                n = seconds[second] - 1
                if n:
                    seconds[second] = n
                else:
                    del seconds[second]
            sessions.set(key, ingest_ts, left, _route_of(event), video)  # the session's shard route
            if left < ingest_ts:
                second = _presence_second(ingest_ts)
                seconds[second] = seconds.get(second, 0) + 1
        elif ingest_ts > left:
            if beat != NONE and left < beat <= ingest_ts:
                self._watch(video, beat, -1)  # it watched until this leave
            sessions.set(key, beat, ingest_ts, _route_of(event) if held is None else held[2], video)

    def _set_beat(self, key: int, video: str, beat: int, route: int) -> None:
        """Set (or, NONE, drop) a session's newest heartbeat, moving it between the seconds watching."""
        held = self.sessions.get(key)
        old, left = (NONE, NONE) if held is None else (held[0], held[1])
        if old != NONE and left < old:
            self._watch(video, old, -1)
        self.sessions.set(key, beat, left, route, video)
        if beat != NONE and left < beat:
            self._watch(video, beat, 1)

    def _watch(self, video: str, ingest_ts: int, by: int) -> None:
        seconds = self.watching_of(video)
        second = _presence_second(ingest_ts)
        n = seconds.get(second, 0) + by
        if n:
            seconds[second] = n
        else:
            del seconds[second]

    def watching_of(self, video: str) -> dict[int, int]:
        """A video's sessions watching by second of their newest heartbeat, in this partition."""
        watching = self._watching
        if watching is None:
            watching = self._watching = self.sessions.watching()
        seconds = watching.get(video)
        if seconds is None:
            seconds = watching[video] = {}
        return seconds

    def drop_beats(self, video: str, moved: np.ndarray) -> None:
        """Drop sessions' heartbeats (a hot video's moving sessions, handed over to their partitions:
        `presence.RECORD`s)."""
        self._move_sessions(video, moved, taken=False)

    def _move_sessions(self, video: str, moved: np.ndarray, taken: bool) -> None:
        """A hot video's moving sessions (`presence.RECORD`s): taken over here (their heartbeats set),
        or handed over (their heartbeats dropped)."""
        beats = moved["ts"].tolist() if taken else [NONE] * moved.size
        for key, beat, route in zip(moved["fp"].tolist(), beats, moved["route"].tolist(), strict=True):
            self._set_beat(key, video, beat, route)

    def count(
        self,
        event: Event,
        verdict: str,
        viewer: str,
        digest: str,
        fp: int | None = None,
        window: int | None = None,
        first: int | None = None,
    ) -> bool:
        """Apply a judged event (`judge.SHORT`, `QUALIFIED`, a rejection field, or `REACTION`) of
        `viewer` (the user for a reaction; `digest` its `rules.viewer_digest`; `fp` its
        `seen.fingerprint` and, a view, `window` its `counted_views.window_key` and `first` its
        `firsts.first_key`, made here if not given); False for a copy that changed nothing."""
        event_id = event.event_id
        ingest_ts: int = event.ingest_ts  # type: ignore[assignment]  # decode_record checked it
        bucket = _bucket_of(ingest_ts, self.bucket_ms)
        video = event.video_id
        if fp is None:
            fp = fingerprint(video, event_id)
        seen = self.seen.get(fp)
        code = VERDICT_CODE[verdict]
        if seen is not None and (ingest_ts >= seen[0] or seen[1] != code):
            return False  # a later copy, or a copy the bot windows judged otherwise: the first stays
        route, tag = rules.viewer_route(digest), video_tag(video)
        self.seen.put(fp, ingest_ts, code, route, tag)
        was = None if seen is None else _bucket_of(seen[0], self.bucket_ms)
        if verdict == REACTION:
            self._react(
                video, event.user_id or "", event.ts, event_id, rules.REACTION_STATE[event.type], bucket
            )
        elif verdict in (QUALIFIED, FLAGGED):
            if window is None:
                window = window_key(video, viewer, rules.view_window_of(event.ts))
            if first is None:
                first = first_key(video, digest)
            view = (ingest_ts, fp, route, tag)
            self._view(video, window, view, digest, first, bucket, seen, verdict == FLAGGED)
        else:
            name = "short_views" if verdict == SHORT else verdict
            if was is not None:
                self._add(video, was, name, -1)
            self._add(video, bucket, name, 1)
        return True

    def _view(
        self,
        video: str,
        window: int,
        view: Counted,
        digest: str,
        first: int,
        bucket: int,
        seen: Marker | None,
        flagged: bool = False,
    ) -> None:
        """A qualified view (`view`: as its `window` keeps it when counted; `flagged`: in the soft
        band): of a viewer's views of a video in one window, the first by (ingest_ts, marker
        fingerprint) counts, the others are repeats. The counted view's bucket counts it in
        `flagged` too when it is flagged (a repeat is not, as the batch has it)."""
        windows = self.windows
        counted = windows.get(window)
        if seen is not None:  # an earlier copy of an applied view
            was = _bucket_of(seen[0], self.bucket_ms)
            if counted is not None and counted[1] == view[1]:  # the counted one: it stays, earlier
                windows.put(window, view)
                self._add(video, was, "views", -1)
                if flagged:
                    self._add(video, was, "flagged", -1)
                self._count_view(video, digest, first, bucket, flagged)
                return
            self._add(video, was, "repeat_views", -1)
        if counted is None:
            windows.put(window, view)
            self._count_view(video, digest, first, bucket, flagged)
        elif (view[0], view[1]) < (counted[0], counted[1]):
            windows.put(window, view)
            was = _bucket_of(counted[0], self.bucket_ms)
            self._add(video, was, "views", -1)
            self._add(video, was, "repeat_views", 1)
            # The view it replaces was flagged if its marker says so (a marker past the retry
            # horizon is gone: its flag then stays where it was, until the batch).
            marker = self.seen.get(counted[1])
            if marker is not None and marker[1] == _FLAGGED_CODE:
                self._add(video, was, "flagged", -1)
            self._count_view(video, digest, first, bucket, flagged)
        else:
            self._add(video, bucket, "repeat_views", 1)

    def _count_view(self, video: str, digest: str, key: int, bucket: int, flagged: bool) -> None:
        """A counted view: its bucket's views (and `flagged`) and sketch, and the viewer's first
        bucket (`key`: its `firsts.first_key`; each bucket's `uniques` counts the viewers first
        counted in it)."""
        self._add(video, bucket, "views", 1)
        if flagged:
            self._add(video, bucket, "flagged", 1)
        self.changes.sketches.setdefault(video + SEP + str(bucket), []).append(digest)
        first = self.firsts.first(key)
        if first is None and self.viewers_of.get(video, 0) >= EXACT_VIEWERS_LIMIT:
            return  # past the exact limit: only the sketches grow
        if first is None or bucket < first:
            self.firsts.set(key, bucket, video, digest, first is None)
            self._add(video, bucket, "uniques", 1)
            if first is not None:
                self._add(video, first, "uniques", -1)

    def _react(self, video: str, user: str, ts: int, event_id: str, state: str, bucket: int) -> None:
        """Likes of a (user, video) pair: after bucket k the pair is in the state of its latest
        reaction by (ts, event_id) among those ingested up to k, and each bucket holds the change of
        state in it. The pair keeps the reactions that decide its state in some bucket, buckets
        and orders both increasing, so a reaction applied out of ingestion order corrects the
        buckets it reaches."""
        key = video + SEP + user
        old = self.reactions.get(key, ())
        order = (ts, event_id)
        new: list[Reaction] = []
        placed = False
        for e in old:
            at = e[3]
            if (e[0], e[1]) == order and at <= bucket:
                return  # this reaction, applied already (as early or earlier)
            if at <= bucket and order < (e[0], e[1]):
                return  # a later reaction ingested no later: this one never decides a state
            if at >= bucket and not order < (e[0], e[1]):
                continue  # this one is later (or the same, ingested earlier) and ingested no later
            if at > bucket and not placed:
                new.append((ts, event_id, state, bucket))
                placed = True
            new.append(e)
        if not placed:
            new.append((ts, event_id, state, bucket))
        changes: dict[int, list[int]] = {}
        _state_changes(old, -1, changes)
        _state_changes(new, 1, changes)
        # Reactions ingested before the retention fold into the first one kept (their buckets expired).
        drop = 0
        floor = bucket - self.keep_buckets
        while len(new) - drop > 1 and (int(new[drop + 1][3]) < floor or len(new) - drop > MAX_REACTIONS):
            drop += 1
        self.reactions[key] = tuple(new[drop:])
        self.changes.keys["reactions"].add(key)
        for at, (likes, dislikes) in changes.items():
            if likes:
                self._add(video, at, "likes", likes)
            if dislikes:
                self._add(video, at, "dislikes", dislikes)

    def _add(self, video: str, bucket: int, name: str, by: int) -> None:
        key = video + SEP + str(bucket)
        fields = self.counts.get(key)
        if fields is None:
            fields = self.counts[key] = {}
        if key not in self._counts_before:
            self._counts_before[key] = dict(fields)
            self._changed_counts.add(key)
        fields[name] = fields.get(name, 0) + by

    def _settle(self) -> None:
        """Carry the micro-batch's arrivals and the changes of its video buckets to the platform's
        buckets (every field but `uniques`: first sightings per video have no platform meaning)."""
        for arrived_in, n in self._arrived.items():
            self._add_platform(str(arrived_in), "events", n)
        for key, before in self._counts_before.items():
            bucket = key.rpartition(SEP)[2]
            for name, value in self.counts[key].items():
                old = before.get(name)
                if name != "uniques" and (old is None or value != old):
                    self._add_platform(bucket, name, value - (old or 0))
        self._arrived, self._counts_before = {}, {}

    def _add_platform(self, bucket: str, name: str, by: int) -> None:
        fields = self.platform.get(bucket)
        if fields is None:
            fields = self.platform[bucket] = {}
        fields[name] = fields.get(name, 0) + by
        self.changes.keys["platform"].add(bucket)

    # -- a hot video's shard plan and the hand-off of its moving viewers ---------------------------------

    def plan_shards(self, video: str, shards: int, active_from: int) -> None:
        """This partition, the video's home, sends its viewers over `shards` shards from `active_from`."""
        self.plans[video] = [shards, active_from, 0]
        self.changes.keys["plans"].add(video)

    def closing(self, grace_ms: int) -> list[str]:
        """The planned videos whose every event ingested before the plan holds is applied here: this
        partition applied an event ingested `grace_ms` (the producer's delivery timeout) after it."""
        return [
            v
            for v, (_, since, closed) in self.plans.items()
            if not closed and self.newest_ingest >= since + grace_ms
        ]

    def close(self, video: str) -> None:
        self.plans[video][2] = 1
        self.changes.keys["plans"].add(video)

    def hold(self, event: Event) -> None:
        """An event of a video whose viewers' state this partition has not taken over yet."""
        held = self.pending.setdefault(event.video_id, [])
        held.append(encode_events([event]))
        self.changes.keys["pending"].add(event.video_id)

    def take_over(self, video: str, entries: dict[bytes, bytes]) -> list[Event]:
        """Load the entries the video's home handed over for this partition; return the events that
        waited for them, in arrival order (to apply now)."""
        for name, raw in entries.items():
            table, _, key = name.decode().partition(SEP)
            if table == "firsts":  # the video's `firsts.RECORD`s
                self.firsts.load(([video], raw), changed=True)
                continue
            if table == "sessions":  # the video's sessions watching, as `presence.RECORD`s
                self._move_sessions(video, np.frombuffer(raw, PRESENCE_RECORD), taken=True)
                continue
            if table in ROW_TABLES:  # records of the table's dtype
                getattr(self, table).load(raw, changed=True)
                continue
            value = _as_kept(table, _decoder.decode(raw))
            getattr(self, table)[key] = value
            self.changes.keys[table].add(key)
        self.imported[video] = 1
        self.changes.keys["imported"].add(video)
        held = self.pending.pop(video, [])
        self.changes.keys["pending"].add(video)
        return [e for raw in held for e in decode_events(raw)]

    # -- handing over and restoring -----------------------------------------------------------------

    def delta(self) -> dict[str, object]:
        """The changelog entry of the events applied since the last call: each changed entry's new
        value (None: dropped), the sketches' digests and the offset; resets the changes."""
        self._settle()
        floor = self.newest_ingest - self.horizon_ms
        self.seen.trim(floor)  # whole slabs: no scan
        self.windows.trim(floor)
        changes, self.changes = self.changes, Changes()
        self._bind_changes()
        entry: dict[str, object] = {"offset": self.offset, "newest": self.newest_ingest}
        for table in TABLES:
            if table in ROW_TABLES:
                entry[table] = getattr(self, table).take_changes()
                continue
            values = getattr(self, table)
            entry[table] = {key: values.get(key) for key in changes.keys[table]}
        entry["sketches"] = changes.sketches
        if changes.forward:
            entry["forward"] = changes.forward
        return entry

    def snapshot(self) -> dict[str, object]:
        """Every entry (after `trim`), in the changelog entry's layout: the tables themselves, not
        copies (encode it before the state changes again)."""
        self._settle()
        entry: dict[str, object] = {"offset": self.offset, "newest": self.newest_ingest, "sketches": {}}
        for table in TABLES:
            held = getattr(self, table)
            entry[table] = held.entry_of(held.rows()) if table in ROW_TABLES else held
        return entry

    def table_copies(self) -> dict[str, Any]:
        """A shallow copy of every table (after the batch's platform counts are settled), the tables
        of fixed-width rows as records: what a snapshot build encodes over the next batches
        (`speed_layer/state/snapshot.py`)."""
        self._settle()
        return {
            table: getattr(self, table).rows() if table in ROW_TABLES else dict(getattr(self, table))
            for table in TABLES
        }

    def load(self, entry: Entry) -> None:
        """Upsert a snapshot's or a changelog entry's values (restore); a table without drops is
        taken in one update (a snapshot's tables all are)."""
        self.offset = max(self.offset, entry["offset"])
        self.newest_ingest = max(self.newest_ingest, entry["newest"])
        self._watching = None  # made again from the sessions on first use
        for table in TABLES:
            if table in ROW_TABLES:
                getattr(self, table).load(entry[table])  # type: ignore[literal-required]
                continue
            values = getattr(self, table)
            changed: dict[str, Any] = entry[table]  # type: ignore[literal-required]
            if None in changed.values():
                for key, value in changed.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
            else:
                values.update(changed)

    def trim(self) -> None:
        """Drop what is older than the retry horizon (markers, windows, presence) or the retention
        (counts and platform buckets, whose Redis keys expired). The drops are not changes (logged,
        they would make the entry of a snapshot build's first batch as large as all that aged out
        since the last build): a restore while a build is under way may hold such entries again
        until its own next trim, which only makes its deduplication longer, as the batch layer's
        is, and counts nothing (presence older than the readers' window is not written)."""
        floor = self.newest_ingest - self.horizon_ms
        oldest = _bucket_of(self.newest_ingest, self.bucket_ms) - self.keep_buckets
        self.seen.trim(floor)
        self.windows.trim(floor)
        self.counts = {k: v for k, v in self.counts.items() if int(k.rpartition(SEP)[2]) >= oldest}
        self.platform = {k: v for k, v in self.platform.items() if int(k) >= oldest}
        # Presence by whole seconds, as `watching` counts it: a leave goes with the beats before it,
        # and the seconds kept need no recount.
        present = _presence_second(self.newest_ingest - PRESENCE_KEEP_MS)
        self.sessions.trim(present)
        if self._watching is not None:
            for video, seconds in list(self._watching.items()):
                kept = {second: n for second, n in seconds.items() if second >= present}
                if kept:
                    self._watching[video] = kept
                else:
                    del self._watching[video]


def _as_kept(table: str, value: Any) -> Any:
    """A handed-over value as the table keeps it: reaction histories as tuples of tuples (msgpack
    gives lists)."""
    if table == "reactions":
        return tuple(tuple(row) for row in value)
    return value


def _state_changes(entries: Sequence[Reaction], sign: int, into: dict[int, list[int]]) -> None:
    """Add `sign` times each bucket's change of (liked, disliked) along a pair's reactions."""
    liked = disliked = 0
    for e in entries:
        like = 1 if e[2] == _LIKED else 0
        dislike = 1 if e[2] == _DISLIKED else 0
        if like != liked or dislike != disliked:
            delta = into.setdefault(e[3], [0, 0])
            delta[0] += sign * (like - liked)
            delta[1] += sign * (dislike - disliked)
            liked, disliked = like, dislike
