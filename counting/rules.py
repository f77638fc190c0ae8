"""The counting rules as plain functions and constants: dedup, views, viewers, reactions, buckets."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from hashlib import blake2b

from counting.event import Event

RULES_VERSION = "2026.11.2"

MIN_WATCH_SECS = 30.0
VIEW_WINDOW_MS = 30 * 60_000
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
# Address velocity counts the views from an address in the 60 s of event time up to each view:
# those with ts in [ts - VELOCITY_WINDOW_MS + 1, ts], ties included.
VELOCITY_WINDOW_MS = 60_000
DAY_MS = 24 * 3_600_000
PRESENCE_MS = 60_000
# How long the ingest API trusts a video's shard plan before reading it again: a new plan is set to
# hold from more than this ahead, so every ingest process routes by it from the same moment.
SHARD_CACHE_MS = 1_000
ANON_VIEWER_PREFIX = "anon:"
# The events of presence: they count sessions, not viewers.
PRESENCE_TYPES = frozenset({"heartbeat", "leave"})

LIKED = "liked"
DISLIKED = "disliked"
NONE = "none"
REACTION_STATE: dict[str, str] = {"like": LIKED, "dislike": DISLIKED, "unlike": NONE, "undislike": NONE}


def bucket_of(ingest_ts: int, bucket_ms: int) -> int:
    """The speed-layer bucket of an event: by ingestion time, never event time."""
    return ingest_ts // bucket_ms


def bucket_start(bucket: int, bucket_ms: int) -> int:
    """The first ingestion time (ms) of a bucket."""
    return bucket * bucket_ms


def bucket_edge_at_or_before(ts: int, bucket_ms: int) -> int:
    """The start of the bucket that holds `ts` (the bucket edge at or before it)."""
    return bucket_start(bucket_of(ts, bucket_ms), bucket_ms)


def bucket_after(ts: int, bucket_ms: int) -> int:
    """The first bucket that starts at or after `ts` (a range's exclusive end in buckets)."""
    return -(-ts // bucket_ms)


def is_on_bucket_edge(cutoff_ms: int, bucket_ms: int) -> bool:
    return cutoff_ms % bucket_ms == 0


def viewer_of(event: Event) -> str:
    """Who watched: the user, or `anon:` + session for an anonymous viewer."""
    if event.user_id is not None:
        return event.user_id
    return f"{ANON_VIEWER_PREFIX}{event.session_id}"


@lru_cache(maxsize=1 << 17)  # the hash costs about 1 µs, a hit 0.1: a viewer's events come close together
def viewer_digest(viewer: str) -> str:
    """What the unique-viewer sets and sketches hold for a viewer: 8 bytes of BLAKE2b in hex (even
    spread for the HyperLogLog, a few bytes per viewer in the exact set)."""
    return blake2b(viewer.encode(), digest_size=8).hexdigest()


def viewer_route(digest: str) -> int:
    """A viewer's place among a hot video's shards, from its digest: the shard is this modulo the
    shard count (so the counter can tell a viewer's shard from the digests it keeps)."""
    return int(digest[:8], 16)


def route_of(event: Event) -> int:
    """What picks an event's shard of a hot video (this modulo the shard count): a heartbeat's or a
    leave's session, as if its viewer were anonymous, so that a session's presence stays in one
    shard when its viewer changes (a login mid-session); any other event's viewer, so that a
    viewer's views and an event's copies share a shard."""
    if event.type in PRESENCE_TYPES and event.session_id is not None:
        return viewer_route(viewer_digest(ANON_VIEWER_PREFIX + event.session_id))
    return viewer_route(viewer_digest(viewer_of(event)))


def view_window_of(ts: int) -> int:
    """The 30-minute window of event time in which a viewer counts once per video."""
    return ts // VIEW_WINDOW_MS


def minute_of(ts: int) -> int:
    return ts // MINUTE_MS


def hour_of(ts: int) -> int:
    return ts // HOUR_MS


def velocity_window_start(ts: int) -> int:
    """The earliest event time in the velocity window of a view at `ts`."""
    return ts - VELOCITY_WINDOW_MS + 1


def day_of(ts: int) -> int:
    return ts // DAY_MS


def is_qualified_view(event: Event) -> bool:
    """A view that watched long enough to be a candidate for counting."""
    return event.type == "view" and (event.watch_secs or 0.0) >= MIN_WATCH_SECS


def reaction_state(event_type: str) -> str:
    """The reaction a reaction event leaves: liked, disliked or none."""
    return REACTION_STATE[event_type]


def reaction_order(event: Event) -> tuple[int, str]:
    """The order that decides the latest reaction of a (user, video) pair: ts, then event_id."""
    return (event.ts, event.event_id)


def first_copy_order(event: Event) -> tuple[int, str]:
    """Among copies of one event_id, the one ingested first is the one that counts."""
    return (event.ingest_ts or 0, event.event_id)


def first_copies(events: Sequence[Event]) -> tuple[list[Event], list[tuple[int, int]]]:
    """The events with one copy of each event_id, the one that counts (`first_copy_order`; among
    equals, the earlier in the list), in their order; and `(position, kept position)` of each copy
    left out. One write of the ingest API packs its events into one record per partition, so a
    retry inside one request would otherwise sit twice at one log position, which the raw gate
    refuses as a corrupt write."""
    chosen: dict[str, int] = {}
    left_out: list[tuple[int, int]] = []
    for position, event in enumerate(events):
        other = chosen.setdefault(event.event_id, position)
        if other == position:
            continue
        if first_copy_order(event) < first_copy_order(events[other]):
            chosen[event.event_id] = position
            left_out.append((other, position))
        else:
            left_out.append((position, other))
    if not left_out:
        return list(events), []
    kept = set(chosen.values())
    left_out.sort()
    final = [(position, chosen[events[position].event_id]) for position, _ in left_out]
    return [e for position, e in enumerate(events) if position in kept], final


def presence_second(ingest_ms: int) -> int:
    """The whole second of ingestion time a heartbeat is counted in: presence is kept per second
    (the speed layer writes per video and second how many sessions beat last in it)."""
    return ingest_ms // 1000


def watching_from(now_ms: int) -> int:
    """The first second whose heartbeats still count at `now_ms`: that of `now_ms` - PRESENCE_MS."""
    return presence_second(now_ms - PRESENCE_MS)


def is_watching(last_heartbeat_ms: int | None, last_leave_ms: int | None, now_ms: int) -> bool:
    """Presence: a session watches while its last heartbeat (by ingestion time) lies in a second no
    earlier than that of PRESENCE_MS before now (`watching_from`) and no `leave` was ingested at or
    after it (a leave and a heartbeat of one record share an ingestion time: the leave wins, it is
    what a session sends last)."""
    if last_heartbeat_ms is None or presence_second(last_heartbeat_ms) < watching_from(now_ms):
        return False
    return last_leave_ms is None or last_leave_ms < last_heartbeat_ms
