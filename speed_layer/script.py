"""The atomic Redis write of one micro-batch of one partition: a Lua script that checks the partition's
owner, skips records at or below the stored offset, sets markers if absent, compares reactions,
increments, keeps sketches, trending and shard counts, and stores the offset.

Python decides everything (keys, buckets, verdicts, expiry times); the script only does
set-if-absent, compare, add and increment, so a batch that did not commit leaves no marker behind.

KEYS: [partition offset, partition owner]. The plan is one msgpack array in ARGV[1]; the other keys
it touches travel inside it, built by Python from `counting.keys` (each carries its video's tag):

    [last_offset, owner_generation, exact_viewers_limit, videos_index_key, videos, buckets, shards,
     markers]

    videos (one entry per video of the plan):
      [video_id, viewers_key, reactions_key, presence_key, presence_trim_below, presence, ops]
      presence: flat [ingest_ts, session_id, ...]: the newest heartbeat of each session (ZADD GT,
                idempotent, so it needs no offset check); trim_below 0: no trim this time
      ops: flat, in offset order; each op is its kind, the offset of its record, then its fields:
        SHORT     offset marker event_id bucket
        REJECT    offset marker event_id bucket field
        VIEW      offset marker event_id bucket window viewer viewer_digest
        REACTION  offset marker event_id bucket user_id ts state
    markers: [hash_key, expire_at]: `marker` and `window` in ops index this list. Event ids are
             fields of a hash per (video, day of event time); counted viewers are fields of a hash
             per (video, 30-minute window): HSETNX decides, the hash expires as a whole.
    buckets: [counts_key, buckets_index_key, bucket, counts_expire_at, viewers_sketch_key,
              trending_key, video_id, viewers_key, sketch_expire_at, trending_expire_at];
              `bucket` in ops indexes this list

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
`viewers_key` is a set of the video's viewer digests while it holds fewer than
`exact_viewers_limit` of them (each bucket's `uniques` counts the viewers first seen in it, exact);
at the limit the set is folded into a HyperLogLog under the same key and only the sketch grows.
Every bucket also keeps a HyperLogLog of its counted viewers.

Redis Cluster: the offset, owner, trending and videos-index keys carry no video tag, so one plan
needs a single Redis (a cluster answers CROSSSLOT). The way there: one script per (partition,
video) group, with its offset and owner kept per group under the video's hash tag, and the
trending and videos-index updates sent after the script (they are idempotent maxima / set adds
only when keyed by the group's offset, e.g. ZADD of per-group totals).
"""

from __future__ import annotations

from string import Template

from counting import rules

SHORT = 1
REJECT = 2
VIEW = 3
REACTION = 4
WIDTH = {SHORT: 5, REJECT: 6, VIEW: 8, REACTION: 8}

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

LUA = Template("""
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local plan = cmsgpack.unpack(ARGV[1])
local last, generation, limit = plan[1], plan[2], plan[3]
if generation ~= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') ~= generation then
  return {stored, stored, 0, 0, 0, 1}
end
if last <= stored then
  return {stored, stored, 0, 0, 0, 0}
end

local LIKED, DISLIKED = '$liked', '$disliked'
local call = redis.call
local applied, duplicates, skipped = 0, 0, 0
local buckets, markers = plan[6], plan[8]
local incr = {}     -- bucket index -> field -> delta
local marked = {}   -- marker index -> true when a field was set in it
local viewers = {}  -- bucket index -> list of counted viewers

local function bump(b, field, by)
  local fields = incr[b]
  if not fields then fields = {}; incr[b] = fields end
  fields[field] = (fields[field] or 0) + by
end

local function variadic(command, key, items)
  for i = 1, #items, $chunk do
    call(command, key, unpack(items, i, math.min(i + $chunk - 1, #items)))
  end
end

local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function react(key, b, user, ts, event_id, state)
  local old = call('HGET', key, user)
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
    if ts < old_ts or (ts == old_ts and not bytes_less(old_id, event_id)) then
      return
    end
    old_state = string.sub(old, last_bar + 1)
  end
  call('HSET', key, user, string.format('%d', ts) .. '|' .. event_id .. '|' .. state)
  if old_state ~= state then
    if old_state == LIKED then bump(b, 'likes', -1) end
    if old_state == DISLIKED then bump(b, 'dislikes', -1) end
    if state == LIKED then bump(b, 'likes', 1) end
    if state == DISLIKED then bump(b, 'dislikes', 1) end
  end
end

for _, video in ipairs(plan[5]) do
  local reactions_key = video[3]
  local ops = video[7]
  local i, n = 1, #ops
  while i <= n do
    local kind, offset = ops[i], ops[i + 1]
    local width = 5
    if kind == $view or kind == $reaction then width = 8
    elseif kind == $reject then width = 6 end
    if offset <= stored then
      skipped = skipped + 1
    elseif call('HSETNX', markers[ops[i + 2]][1], ops[i + 3], 1) == 1 then
      applied = applied + 1
      marked[ops[i + 2]] = true
      local b = ops[i + 4]
      if kind == $view then
        if call('HSETNX', markers[ops[i + 5]][1], ops[i + 6], 1) == 1 then
          marked[ops[i + 5]] = true
          bump(b, 'views', 1)
          local list = viewers[b]
          if not list then list = {}; viewers[b] = list end
          list[#list + 1] = ops[i + 7]
        else
          bump(b, 'repeat_views', 1)
        end
      elseif kind == $short then
        bump(b, 'short_views', 1)
      elseif kind == $reject then
        bump(b, ops[i + 5], 1)
      else
        react(reactions_key, b, ops[i + 5], ops[i + 6], ops[i + 3], ops[i + 7])
      end
    else
      duplicates = duplicates + 1
    end
    i = i + width
  end
  local presence = video[6]
  if #presence > 0 then
    for j = 1, #presence, $chunk do
      call('ZADD', video[4], 'GT', unpack(presence, j, math.min(j + $chunk - 1, #presence)))
    end
  end
  if video[5] > 0 then
    call('ZREMRANGEBYSCORE', video[4], '-inf', '(' .. string.format('%d', video[5]))
  end
end

local written_markers = {}
for m in pairs(marked) do
  if markers[m][2] > 0 then call('PEXPIREAT', markers[m][1], markers[m][2]) end
  written_markers[#written_markers + 1] = m
end
local written_sketches, written_buckets = {}, {}

-- Viewers: per bucket in ascending order, so a viewer counts as new in the first bucket it is in.
local order = {}
for b = 1, #buckets do order[b] = b end
table.sort(order, function(x, y) return buckets[x][3] < buckets[y][3] end)
for _, b in ipairs(order) do
  local list = viewers[b]
  if list then
    local entry = buckets[b]
    local video_viewers = entry[8]
    variadic('PFADD', entry[5], list)
    if entry[9] > 0 then call('PEXPIREAT', entry[5], entry[9]) end
    written_sketches[#written_sketches + 1] = b
    local added = 0
    local sketched = false
    for j = 1, #list, $chunk do
      local reply = redis.pcall('SADD', video_viewers, unpack(list, j, math.min(j + $chunk - 1, #list)))
      if type(reply) == 'table' and reply.err then sketched = true; break end
      added = added + reply
    end
    if sketched then
      variadic('PFADD', video_viewers, list)
    else
      if added > 0 then bump(b, 'uniques', added) end
      if added > 0 and call('SCARD', video_viewers) >= limit then
        local members = call('SMEMBERS', video_viewers)
        call('DEL', video_viewers)
        variadic('PFADD', video_viewers, members)
      end
    end
  end
end

local trending = {}
for b, fields in pairs(incr) do
  local entry = buckets[b]
  local wrote = false
  for field, by in pairs(fields) do
    if by ~= 0 then call('HINCRBY', entry[1], field, by); wrote = true end
  end
  if wrote then
    if entry[4] > 0 then
      call('ZADD', entry[2], entry[3], entry[3])
      call('PEXPIREAT', entry[1], entry[4])
    end
    written_buckets[#written_buckets + 1] = b
  end
  local views = fields['views']
  if views and views > 0 then
    call('ZINCRBY', entry[6], views, entry[7])
    trending[entry[6]] = entry[10]
  end
end
for key, expire_at in pairs(trending) do
  call('PEXPIREAT', key, expire_at)
end

if #plan[5] > 0 then
  local names = {}
  for _, video in ipairs(plan[5]) do names[#names + 1] = video[1] end
  variadic('SADD', plan[4], names)
end
for _, s in ipairs(plan[7]) do
  local current = tonumber(call('GET', s[1]) or '1')
  if s[2] > current then
    call('SET', s[1], s[2], 'PX', s[3])
  else
    call('PEXPIRE', s[1], s[3])
  end
end
call('SET', KEYS[1], last)
return {stored, last, applied, duplicates, skipped, 0, written_buckets, written_sketches, written_markers}
""").substitute(
    liked=rules.LIKED,
    disliked=rules.DISLIKED,
    short=SHORT,
    reject=REJECT,
    view=VIEW,
    reaction=REACTION,
    chunk=CHUNK,
)
