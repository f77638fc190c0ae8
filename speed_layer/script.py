"""The atomic Redis write of one micro-batch of one partition (`write.lua`) and the layout of its plan.
Why it is built so, and what it costs: docs/decisions/0001-exactly-once-via-redis.md.

Python decides the verdicts, keys, buckets and expiry times; the script only sets if absent,
compares, adds and increments. Markers hold ingest times, so any order of application gives the
same state (0001, "Any order of application").

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

Unique viewers are kept as `viewer_digest`s (8 bytes of BLAKE2b of the viewer in hex, by Python;
why: docs/decisions/0003-lambda-merge.md). `viewers_key` is a hash of the video's viewer digests to
the first bucket each was counted in while it holds fewer than `exact_viewers_limit` of them (each
bucket's `uniques` counts the viewers first seen in it, exact); at the limit it is folded into a
HyperLogLog under the same key and only the sketch grows.
Every bucket also keeps a HyperLogLog of its counted viewers.

Redis Cluster: one plan touches keys of many videos and untagged ones, so it needs a single Redis
(a cluster answers CROSSSLOT). The way there and its measured cost:
docs/decisions/0001-exactly-once-via-redis.md.
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
