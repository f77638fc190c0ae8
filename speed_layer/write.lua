-- The counter's atomic write of one partition plan: see speed_layer/script.py for the layout.
-- $$names are filled in by script.py from the rules (string.Template).
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local plan = cmsgpack.unpack(ARGV[1])
local last, generation, limit = plan[1], plan[2], plan[3]
if generation ~= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') ~= generation then
  return {stored, stored, 0, 0, 0, 1}
end
-- A hot video's shard count is raised whatever the offsets say (it only ever grows): a plan that
-- replays records must not drop the raise it carries.
local function raise_shards()
  for _, s in ipairs(plan[7]) do
    local current = tonumber(redis.call('GET', s[1]) or '1')
    if s[2] > current then
      redis.call('SET', s[1], s[2], 'PX', s[3])
    else
      redis.call('PEXPIRE', s[1], s[3])
    end
  end
end
if last <= stored then
  raise_shards()
  return {stored, stored, 0, 0, 0, 0}
end

local LIKED, DISLIKED = '$liked', '$disliked'
local call = redis.call
local applied, duplicates, skipped = 0, 0, 0
local buckets, markers = plan[6], plan[8]
local bucket_ms, trending_prefix, now_ms, retention_ms = plan[9], plan[10], plan[11], plan[12]
local platform_prefix = plan[13]
local platform = {}   -- bucket number -> field -> delta over every video (written once at the end)
local platform_expiry = {}  -- bucket number -> expire_at
local keep_buckets = math.floor(retention_ms / bucket_ms) + 1
local incr = {}       -- bucket index -> field -> delta
local marked = {}     -- marker index -> true when a field was set in it
local viewers = {}    -- bucket index -> digests of the viewers counted in it
local video_of = {}   -- video id -> its entry in the plan (counts-key prefix, buckets index)
local index_of = nil  -- bucket-counts key -> bucket index (built when first needed)
local video_id, reactions_key = nil, nil  -- the video being applied

local function bump(b, field, by)
  local fields = incr[b]
  if not fields then fields = {}; incr[b] = fields end
  fields[field] = (fields[field] or 0) + by
end

local function add_to_platform(bucket, field, by, expire_at)
  if field == 'uniques' then return end  -- first sightings per video: no platform meaning
  local fields = platform[bucket]
  if not fields then fields = {}; platform[bucket] = fields; platform_expiry[bucket] = expire_at end
  fields[field] = (fields[field] or 0) + by
end

local function variadic(command, key, items)
  for i = 1, #items, $chunk do
    call(command, key, unpack(items, i, math.min(i + $chunk - 1, #items)))
  end
end

-- A number's decimal text, once per number: redis.call formats a number argument on every call
-- (snprintf), and the same expiry times, buckets and deltas recur across the keys of a plan.
local texts = {}
local function digits(n)
  local text = texts[n]
  if not text then text = string.format('%d', n); texts[n] = text end
  return text
end

local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The order of the counting rules (`counting.rules.first_copy_order` and `reaction_order`, which
-- Python's planner and the oracle use): ingest time (or event time for reactions), then event id.
local function before(ts1, id1, ts2, id2)
  return ts1 < ts2 or (ts1 == ts2 and bytes_less(id1, id2))
end

-- `ingest_ts|rest` -> ingest_ts, rest (rest nil without a bar)
local function split(value)
  local bar = string.find(value, '|', 1, true)
  if not bar then return tonumber(value), nil end
  return tonumber(string.sub(value, 1, bar - 1)), string.sub(value, bar + 1)
end

-- Add to a field of a bucket of `video` by bucket number: in this plan when the plan has the bucket,
-- else straight in Redis (a bucket made here gets the expiry and index entry Python gives one).
local function adjust(video, bucket, field, by)
  local owner = video_of[video]
  local key = owner[8] .. digits(bucket)
  if not index_of then
    index_of = {}
    for b, entry in ipairs(buckets) do index_of[entry[1]] = b end
  end
  local b = index_of[key]
  if b then
    bump(b, field, by)
    return
  end
  local expire_at = math.max((bucket + 1) * bucket_ms, now_ms) + retention_ms
  add_to_platform(bucket, field, by, expire_at)
  call('HINCRBY', key, field, digits(by))
  if call('PTTL', key) == -1 then
    call('PEXPIREAT', key, digits(expire_at))
    call('ZADD', owner[9], digits(bucket), digits(bucket))
  end
  if field == 'views' then
    local trending = trending_prefix .. digits(bucket)
    call('ZINCRBY', trending, digits(by), video)
    if call('PTTL', trending) == -1 then call('PEXPIREAT', trending, digits(expire_at)) end
  end
end

local function count_view(b, digest)
  bump(b, 'views', 1)
  local list = viewers[b]
  if not list then list = {}; viewers[b] = list end
  list[#list + 1] = digest
end

-- A qualified view. Of a viewer's views of a video in one window, the first by (ingest_ts,
-- event_id) counts, in whatever order the views are applied: the window hash holds the event id of
-- the counted one (its ingest time is in its event marker: same video, same day), and an earlier
-- view takes its place.
local function view(b, ts, event_id, m, w, viewer, digest)
  local key = markers[w][1]
  if call('HSETNX', key, viewer, event_id) == 1 then
    marked[w] = true
    count_view(b, digest)
    return
  end
  local counted_id = call('HGET', key, viewer)
  local counted_ts = split(call('HGET', markers[m][1], counted_id) or '')
  if counted_ts and before(tonumber(ts), event_id, counted_ts, counted_id) then
    call('HSET', key, viewer, event_id)
    local was = math.floor(counted_ts / bucket_ms)
    adjust(video_id, was, 'views', -1)
    adjust(video_id, was, 'repeat_views', 1)
    count_view(b, digest)
  else
    bump(b, 'repeat_views', 1)
  end
end

-- Likes of a (user, video) pair: after bucket k the pair is in the state of its latest reaction by
-- (ts, event_id) among those ingested up to k, and each bucket holds the change of state in it.
-- The reactions hash keeps, per user, the reactions that decide the state in some bucket (a
-- msgpack list of {ts, event_id, state, bucket}, buckets and orders both increasing), so a
-- reaction applied out of ingestion order corrects the buckets it reaches.
local function state_changes(entries, sign, into)
  local liked, disliked = 0, 0
  for _, e in ipairs(entries) do
    local l = (e[3] == LIKED) and 1 or 0
    local d = (e[3] == DISLIKED) and 1 or 0
    if l ~= liked or d ~= disliked then
      local delta = into[e[4]]
      if not delta then delta = {0, 0}; into[e[4]] = delta end
      delta[1] = delta[1] + sign * (l - liked)
      delta[2] = delta[2] + sign * (d - disliked)
      liked, disliked = l, d
    end
  end
end

local function react(b, user, ts, event_id, state)
  local bucket = buckets[b][3]
  local raw = call('HGET', reactions_key, user)
  local old = {}
  if raw then
    if string.byte(raw, 1) < 0x90 then  -- not a msgpack array: a layout older than this script's
      error('reactions of ' .. user .. ' in ' .. reactions_key .. ' are in an earlier layout: stop the '
        .. 'counter, run tally speed migrate, start it again')
    end
    old = cmsgpack.unpack(raw)
  end
  local new, placed = {}, false
  for _, e in ipairs(old) do
    if e[1] == ts and e[2] == event_id and e[4] <= bucket then
      return  -- this reaction, applied already (as early or earlier)
    elseif e[4] <= bucket and before(ts, event_id, e[1], e[2]) then
      return  -- a later reaction ingested no later: this one never decides a state
    elseif e[4] >= bucket and not before(ts, event_id, e[1], e[2]) then
      -- this reaction is later (or the same one, ingested earlier) and ingested no later: drop e
    else
      if e[4] > bucket and not placed then
        new[#new + 1] = {ts, event_id, state, bucket}
        placed = true
      end
      new[#new + 1] = e
    end
  end
  if not placed then new[#new + 1] = {ts, event_id, state, bucket} end
  local changes = {}
  state_changes(old, -1, changes)
  state_changes(new, 1, changes)
  -- Reactions ingested before the retention fold into the first one kept (their buckets expired).
  local drop = 0
  while #new - drop > 1 and (new[drop + 2][4] < bucket - keep_buckets or #new - drop > 64) do
    drop = drop + 1
  end
  if drop > 0 then
    local kept = {}
    for j = drop + 1, #new do kept[#kept + 1] = new[j] end
    new = kept
  end
  call('HSET', reactions_key, user, cmsgpack.pack(new))
  for at, delta in pairs(changes) do
    if at == bucket then
      if delta[1] ~= 0 then bump(b, 'likes', delta[1]) end
      if delta[2] ~= 0 then bump(b, 'dislikes', delta[2]) end
    else
      if delta[1] ~= 0 then adjust(video_id, at, 'likes', delta[1]) end
      if delta[2] ~= 0 then adjust(video_id, at, 'dislikes', delta[2]) end
    end
  end
end

-- An op whose event marker exists: a copy of an applied event. A copy ingested earlier than the
-- applied one (it reached another partition, or its partition out of time order) takes its place
-- and its outcome moves to the copy's bucket. Returns false for a copy that changes nothing.
local function earlier_copy(kind, ops, i, marker)
  local ts, b, event_id = split(ops[i + 5]), ops[i + 4], ops[i + 3]
  local applied_ts, what = split(marker)
  if not applied_ts or ts >= applied_ts then return false end
  local was = math.floor(applied_ts / bucket_ms)
  if kind == $short and what == 's' then
    adjust(video_id, was, 'short_views', -1)
    bump(b, 'short_views', 1)
  elseif kind == $reject and what == ops[i + 6] then
    adjust(video_id, was, what, -1)
    bump(b, what, 1)
  elseif kind == $view and not what then
    local w, viewer = ops[i + 6], ops[i + 7]
    if call('HGET', markers[w][1], viewer) == event_id then  -- counted: it stays, earlier
      adjust(video_id, was, 'views', -1)
      count_view(b, ops[i + 8])
    else
      adjust(video_id, was, 'repeat_views', -1)
      view(b, ops[i + 5], event_id, ops[i + 2], w, viewer, ops[i + 8])
    end
  elseif kind == $reaction and what == 'a' then
    react(b, ops[i + 6], ops[i + 7], event_id, ops[i + 8])
  else
    return false  -- the copies' verdicts differ (the speed layer's bot windows): the first stays
  end
  call('HSET', markers[ops[i + 2]][1], event_id, ops[i + 5])
  return true
end

for _, video in ipairs(plan[5]) do
  video_id, reactions_key = video[1], video[3]
  video_of[video_id] = video
  local ops = video[7]
  local i, n = 1, #ops
  while i <= n do
    local kind, offset = ops[i], ops[i + 1]
    local width = 6
    if kind == $view or kind == $reaction then width = 9
    elseif kind == $reject then width = 7 end
    if offset <= stored then
      skipped = skipped + 1
    else
      local m, event_id = ops[i + 2], ops[i + 3]
      if call('HSETNX', markers[m][1], event_id, ops[i + 5]) == 1 then
        applied = applied + 1
        marked[m] = true
        local b = ops[i + 4]
        if kind == $view then
          view(b, ops[i + 5], event_id, m, ops[i + 6], ops[i + 7], ops[i + 8])
        elseif kind == $short then
          bump(b, 'short_views', 1)
        elseif kind == $reject then
          bump(b, ops[i + 6], 1)
        else
          react(b, ops[i + 6], ops[i + 7], event_id, ops[i + 8])
        end
      else
        earlier_copy(kind, ops, i, call('HGET', markers[m][1], event_id))
        duplicates = duplicates + 1
      end
    end
    i = i + width
  end
  -- Presence (`counting.rules.is_watching`): a leave takes the session out unless a heartbeat
  -- ingested after it is there, and keeps out heartbeats ingested no later that come after it.
  local presence, leaves, left_key = video[6], video[11], video[10]
  for j = 1, #leaves, 2 do
    call('ZADD', left_key, 'GT', leaves[j], leaves[j + 1])
    local beat = call('ZSCORE', video[4], leaves[j + 1])
    if beat and tonumber(beat) <= tonumber(leaves[j]) then call('ZREM', video[4], leaves[j + 1]) end
  end
  if #presence > 0 and call('EXISTS', left_key) == 1 then
    local kept = {}
    for j = 1, #presence, 2 do
      local gone = call('ZSCORE', left_key, presence[j + 1])
      if not gone or tonumber(gone) < tonumber(presence[j]) then
        kept[#kept + 1] = presence[j]
        kept[#kept + 1] = presence[j + 1]
      end
    end
    presence = kept
  end
  if #presence > 0 then
    for j = 1, #presence, $chunk do
      call('ZADD', video[4], 'GT', unpack(presence, j, math.min(j + $chunk - 1, #presence)))
    end
  end
  if video[5] > 0 then
    call('ZREMRANGEBYSCORE', video[4], '-inf', '(' .. digits(video[5]))
    call('ZREMRANGEBYSCORE', left_key, '-inf', '(' .. digits(video[5]))
  end
end

local written_markers = {}
for m in pairs(marked) do
  if markers[m][2] > 0 then call('PEXPIREAT', markers[m][1], digits(markers[m][2])) end
  written_markers[#written_markers + 1] = m
end
local written_sketches, written_buckets = {}, {}

-- Unique viewers: the viewers hash holds each viewer's first bucket (the earliest bucket of a
-- counted view), and each bucket's `uniques` counts the viewers first seen in it; an earlier
-- bucket moves the viewer there.

local order = {}
for b = 1, #buckets do order[b] = b end
table.sort(order, function(x, y) return buckets[x][3] < buckets[y][3] end)
local sketched = {}
for _, b in ipairs(order) do
  local list = viewers[b]
  if list then
    local entry = buckets[b]
    local key, bucket, video = entry[8], entry[3], entry[7]
    local bucket_text = digits(bucket)  -- a number passed to redis.call is formatted on each call
    variadic('PFADD', entry[5], list)
    if entry[9] > 0 then call('PEXPIREAT', entry[5], digits(entry[9])) end
    written_sketches[#written_sketches + 1] = b
    local added = 0
    for j = 1, #list, $chunk do
      local part = {unpack(list, j, math.min(j + $chunk - 1, #list))}
      local firsts = not sketched[key] and redis.pcall('HMGET', key, unpack(part))
      if firsts and firsts.err then
        if call('TYPE', key).ok == 'set' then  -- the layout before the hash: migrate it first
          error(key .. ' is a set of an earlier layout: stop the counter, run tally speed migrate, '
            .. 'start it again')
        end
        firsts = false
      end
      if not firsts then
        sketched[key] = true
        variadic('PFADD', key, part)
      else
        local changed, seen = {}, {}
        for k, digest in ipairs(part) do
          local first = firsts[k] and tonumber(firsts[k])
          if not seen[digest] and (not first or bucket < first) then
            seen[digest] = true
            changed[#changed + 1] = digest
            changed[#changed + 1] = bucket_text
            bump(b, 'uniques', 1)
            if first then adjust(video, first, 'uniques', -1) else added = added + 1 end
          end
        end
        if #changed > 0 then variadic('HSET', key, changed) end
      end
    end
    if added > 0 and not sketched[key] and call('HLEN', key) >= limit then
      local members = call('HKEYS', key)
      call('DEL', key)
      variadic('PFADD', key, members)
      sketched[key] = true
    end
  end
end

local trending = {}
for b, fields in pairs(incr) do
  local entry = buckets[b]
  local wrote = false
  for field, by in pairs(fields) do
    if by ~= 0 then
      call('HINCRBY', entry[1], field, digits(by))
      add_to_platform(entry[3], field, by, entry[10])
      wrote = true
    end
  end
  if wrote then
    if entry[4] > 0 then
      local bucket = digits(entry[3])
      call('ZADD', entry[2], bucket, bucket)
      call('PEXPIREAT', entry[1], digits(entry[4]))
    end
    written_buckets[#written_buckets + 1] = b
  end
  local views = fields['views']
  if views and views ~= 0 then
    call('ZINCRBY', entry[6], digits(views), entry[7])
    trending[entry[6]] = entry[10]
  end
end
for key, expire_at in pairs(trending) do
  call('PEXPIREAT', key, digits(expire_at))
end
-- Every event the records above the stored offset brought, by the bucket of its ingestion time.
for _, arrival in ipairs(plan[14]) do
  if arrival[1] > stored then
    local bucket = arrival[2]
    add_to_platform(bucket, 'events', arrival[3], math.max((bucket + 1) * bucket_ms, now_ms) + retention_ms)
  end
end
for bucket, fields in pairs(platform) do
  local key = platform_prefix .. digits(bucket)
  for field, by in pairs(fields) do
    if by ~= 0 then call('HINCRBY', key, field, digits(by)) end
  end
  call('PEXPIREAT', key, digits(platform_expiry[bucket]))
end

if #plan[5] > 0 then
  local names = {}
  for _, video in ipairs(plan[5]) do names[#names + 1] = video[1] end
  variadic('SADD', plan[4], names)
end
raise_shards()
call('SET', KEYS[1], last)
return {stored, last, applied, duplicates, skipped, 0, written_buckets, written_sketches, written_markers}
