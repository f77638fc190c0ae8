"""The atomic Redis write of one micro-batch of one partition: a Lua script (`write.lua`) that checks
the partition's owner, skips records at or below the stored offset, sets markers if absent,
compares reactions, increments, keeps sketches, trending and shard counts, and stores the offset.

Python decides the verdicts, keys, buckets and expiry times; the script only sets if absent,
compares, adds and increments, so a batch that did not commit leaves no marker behind.

The result does not depend on the order the records are applied in. The counting rules pick the
first copy of an event and the first view of a viewer in a window by ingestion order, and a
reaction's state by event time, but a hot video's viewer moves to another partition when its shard
count grows, and two ingest workers may append to a partition out of time order. So the markers
hold the ingest time of what they stand for, and an event applied after a later one takes its
place: a view ingested earlier than the counted one of its window becomes the counted one (the
other turns into a repeat in its own bucket), a viewer's first bucket moves earlier, a copy ingested
earlier moves its outcome to its bucket, and a reaction corrects the like deltas of the buckets it
reaches. Totals and every bucket then equal the oracle's split at any batch cutoff.

KEYS: [partition offset, partition owner]. The plan is one msgpack array in ARGV[1]; the other keys
it touches travel inside it, built by Python from `counting.keys` (each carries its video's tag):

    [last_offset, owner_generation, exact_viewers_limit, videos_index_key, videos, buckets, shards,
     markers, bucket_ms, trending_key_prefix, now_ms, retention_ms, platform_key_prefix, arrivals]

    videos (one entry per video of the plan):
      [video_id, viewers_key, reactions_key, presence_key, presence_trim_below, presence, ops,
       counts_key_prefix, buckets_index_key, presence_left_key, leaves]
      presence: flat [ingest_ts, session_id, ...]: the newest heartbeat of each session (ZADD GT,
                idempotent, so it needs no offset check), ingest_ts as decimal text (a number
                would be formatted again by each redis.call); trim_below 0: no trim this time
      leaves: flat [ingest_ts, session_id, ...]: the newest leave of each session, kept in
              presence_left_key (ZADD GT); a heartbeat ingested no later than a session's leave
              is not added, and a leave removes a heartbeat ingested no later
      ops: flat, in offset order; each op is its kind, the offset of its record, then its fields:
        SHORT     offset marker event_id bucket mark
        REJECT    offset marker event_id bucket mark field
        VIEW      offset marker event_id bucket mark window viewer viewer_digest
        REACTION  offset marker event_id bucket mark user_id ts state
      mark: the event marker's value, text: the ingest_ts, then `|s` (short), `|a` (reaction) or
            `|` and the field (rejection); a qualified view's is its ingest_ts alone
    markers: [hash_key, expire_at]: `marker` and `window` in ops index this list. Event ids are
             fields of a hash per (video, day of event time), valued the `mark` of the applied
             copy; counted viewers are fields of a hash per (video, 30-minute window),
             valued the event id of the counted view. The hashes expire as a whole.
    buckets: [counts_key, buckets_index_key, bucket, counts_expire_at, viewers_sketch_key,
              trending_key, video_id, viewers_key, sketch_expire_at, trending_expire_at];
              `bucket` in ops indexes this list; a bucket outside the plan is reached by its
              number (counts_key_prefix .. bucket), made with the same expiry when missing
    now_ms, retention_ms: for those expiries; a pair's reactions older than the retention fold
    platform_key_prefix: every change of a bucket's counts is also added to the platform's hash of
             that bucket (the sum over videos, for the overview), once per bucket and field a plan
    arrivals: [offset, bucket, events] of each record: its events (every type) are added to the
             platform's `events` of the bucket of their ingestion time if the record is above the
             stored offset (a replayed record adds nothing)

    An expire_at of 0 means "this worker already gave the key its expiry": the script skips the
    PEXPIREAT (and the buckets-index ZADD that goes with a new counts hash). The script answers
    which buckets, sketches and markers it wrote, so the worker learns which keys have one.
    shards:  [shards_key, wanted, ttl_ms]: raise a hot video's shard count (never lowers it)

Timestamps are integers below 2^53; Redis formats Lua numbers with 17 significant digits, so
millisecond times pass through exactly.

Unique viewers are kept as `viewer_digest`s (8 bytes of BLAKE2b of the viewer in hex, by Python):
Redis hashes HyperLogLog elements with MurmurHash64A, which spreads look-alike names such as
`viewer-1`, `viewer-2` badly (-3 % at a million of them); digests spread evenly (0.81 % standard
error), and 64-bit digests of up to the exact limit's viewers do not collide in practice.
`viewers_key` is a hash of the video's viewer digests to the first bucket each was counted in
while it holds fewer than `exact_viewers_limit` of them (each bucket's `uniques` counts the viewers
first seen in it, exact); at the limit it is folded into a HyperLogLog under the same key and only
the sketch grows.
Every bucket also keeps a HyperLogLog of its counted viewers.

Redis Cluster: the offset, owner, trending and videos-index keys carry no video tag, and one plan
holds many videos, so one plan needs a single Redis (a cluster answers CROSSSLOT). The way there:
one script per (partition, video group) with the group's offset and owner generation kept under
its hash tag, and the trending and videos-index updates sent after the script as idempotent
`ZADD GT` of the bucket's total views (returned by the script, resent on replay) and `SADD`.
Measured on 200,000 bench events (2,000 videos, 80 plans): one script per (partition, video) made
27,016 calls instead of 80 and cost about 30 % more Redis CPU per event (11.7-11.9 against
14.6-15.8 us, same plans), so groups should hold many videos (a hash tag per group of videos
rather than per video).
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from counting import rules

SHORT = 1
REJECT = 2
VIEW = 3
REACTION = 4
WIDTH = {SHORT: 6, REJECT: 7, VIEW: 9, REACTION: 9}

# Result of the script: [offset stored before, offset stored after, ops applied, ops that were
# duplicates (their event marker existed), ops skipped (record at or below the stored offset),
# 1 when the plan was refused because another worker owns the partition now, then the indexes of
# the buckets, sketches and markers it wrote (absent when it wrote nothing)].
RESULT_FIELDS: tuple[str, ...] = (
    "offset_before",
    "offset_after",
    "applied",
    "duplicates",
    "skipped",
    "fenced",
)

# Lua's unpack() is limited by its C stack; variadic commands are sent in chunks of this many.
CHUNK = 4_000

LUA = Template(Path(__file__).with_name("write.lua").read_text()).substitute(
    liked=rules.LIKED,
    disliked=rules.DISLIKED,
    short=SHORT,
    reject=REJECT,
    view=VIEW,
    reaction=REACTION,
    chunk=CHUNK,
)
