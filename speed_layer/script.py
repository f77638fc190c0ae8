"""The atomic Redis write of one micro-batch of one partition: a Lua script that skips records at or
below the stored offset, sets markers if absent, compares reactions, increments, and stores the offset.

Python decides everything (keys, buckets, verdicts, expiry times); the script only does
set-if-absent, compare and increment, so a batch that did not commit leaves no marker behind.

The plan is one msgpack array in ARGV[1]; keys are passed in KEYS and referenced by their index:

    [last_offset, ops, buckets, videos_index_key, videos, presence_trims]

    ops (each starts with the offset of the record it came from, in offset order):
      [offset, SHORT,     event_marker, marker_expire_at, bucket_key]
      [offset, REJECT,    event_marker, marker_expire_at, bucket_key, field]
      [offset, VIEW,      event_marker, marker_expire_at, bucket_key,
                          window_marker, window_expire_at, viewers_key, viewer]
      [offset, REACTION,  event_marker, marker_expire_at, bucket_key,
                          reactions_key, user_id, ts, event_id, state]
      [offset, HEARTBEAT, presence_key, session_id, ingest_ts]
    buckets:        [bucket_key, buckets_index_key, bucket, expire_at]
    presence_trims: [presence_key, drop_scores_below]

Timestamps and scores travel as strings so Lua's number formatting never rounds them.

Redis Cluster: every key is declared in KEYS, but one plan covers every video of a partition plus
the untagged `tally:offsets:*` and `tally:videos` keys, so it needs a single Redis (a cluster
answers CROSSSLOT). The way there: one script per (partition, video) group with the offset kept
per (partition, video) under the video's hash tag, and the videos index added outside the script.
"""

from __future__ import annotations

from string import Template

from counting import rules

SHORT = 1
REJECT = 2
VIEW = 3
REACTION = 4
HEARTBEAT = 5

# Result of the script: [offset stored before, offset stored after, ops applied, ops that were
# duplicates (their event marker existed), ops skipped (record at or below the stored offset)].
RESULT_FIELDS: tuple[str, ...] = ("offset_before", "offset_after", "applied", "duplicates", "skipped")

LUA = Template("""
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local plan = cmsgpack.unpack(ARGV[1])
local last = plan[1]
local ops = plan[2]
if last <= stored then
  return {stored, stored, 0, 0, #ops}
end

local LIKED = '$liked'
local DISLIKED = '$disliked'
local touched = {}
local applied, duplicates, skipped = 0, 0, 0

local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function incr(bucket_idx, field, by)
  redis.call('HINCRBY', KEYS[bucket_idx], field, by)
  touched[bucket_idx] = true
end

local function react(op)
  local key, user, ts, event_id, state = KEYS[op[6]], op[7], op[8], op[9], op[10]
  local old = redis.call('HGET', key, user)
  local old_state = 'none'
  if old then
    local first = string.find(old, '|', 1, true)
    local last_bar = first
    while true do
      local nxt = string.find(old, '|', last_bar + 1, true)
      if not nxt then break end
      last_bar = nxt
    end
    local old_ts = tonumber(string.sub(old, 1, first - 1))
    local old_id = string.sub(old, first + 1, last_bar - 1)
    local new_ts = tonumber(ts)
    if new_ts < old_ts or (new_ts == old_ts and not bytes_less(old_id, event_id)) then
      return
    end
    old_state = string.sub(old, last_bar + 1)
  end
  redis.call('HSET', key, user, ts .. '|' .. event_id .. '|' .. state)
  if old_state ~= state then
    if old_state == LIKED then incr(op[5], 'likes', -1) end
    if old_state == DISLIKED then incr(op[5], 'dislikes', -1) end
    if state == LIKED then incr(op[5], 'likes', 1) end
    if state == DISLIKED then incr(op[5], 'dislikes', 1) end
  end
end

for _, op in ipairs(ops) do
  if op[1] <= stored then
    skipped = skipped + 1
  else
    local kind = op[2]
    if kind == $heartbeat then
      redis.call('ZADD', KEYS[op[3]], 'GT', op[5], op[4])
      applied = applied + 1
    elseif redis.call('SET', KEYS[op[3]], '1', 'NX', 'PXAT', op[4]) then
      applied = applied + 1
      if kind == $short then
        incr(op[5], 'short_views', 1)
      elseif kind == $reject then
        incr(op[5], op[6], 1)
      elseif kind == $view then
        if redis.call('SET', KEYS[op[6]], '1', 'NX', 'PXAT', op[7]) then
          incr(op[5], 'views', 1)
          if redis.call('SADD', KEYS[op[8]], op[9]) == 1 then
            incr(op[5], 'uniques', 1)
          end
        else
          incr(op[5], 'repeat_views', 1)
        end
      elseif kind == $reaction then
        react(op)
      end
    else
      duplicates = duplicates + 1
    end
  end
end

for _, b in ipairs(plan[3]) do
  if touched[b[1]] then
    redis.call('ZADD', KEYS[b[2]], b[3], b[3])
    redis.call('PEXPIREAT', KEYS[b[1]], b[4])
  end
end
for _, video in ipairs(plan[5]) do
  redis.call('SADD', KEYS[plan[4]], video)
end
for _, t in ipairs(plan[6]) do
  redis.call('ZREMRANGEBYSCORE', KEYS[t[1]], '-inf', '(' .. t[2])
end
redis.call('SET', KEYS[1], last)
return {stored, last, applied, duplicates, skipped}
""").substitute(
    liked=rules.LIKED,
    disliked=rules.DISLIKED,
    short=SHORT,
    reject=REJECT,
    view=VIEW,
    reaction=REACTION,
    heartbeat=HEARTBEAT,
)
