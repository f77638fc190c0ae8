-- The counts of one partition for some videos (and the platform) reach their read keys
-- (speed_layer/sink/sink.py builds the argument; on a single Redis it sends the per-event writes,
-- viewers, sketches, reactions and presence, as plain commands instead). Every value is absolute: the partition's part of a bucket is stored
-- with the offset it is as of, and the bucket's sums move by the difference with the part stored
-- before. A part as of an offset no later than the stored one changes nothing, so a replay, or a late
-- write of a worker that lost the partition, is harmless. On a Redis Cluster a call holds one video
-- (or the platform), and every key carries the tag of KEYS[1]; on a single Redis a call holds many:
-- one script call instead of one per video.
-- ARGV[1], msgpack: a list of items, each one video's (or the platform's):
--   {part, offset, buckets, index, viewers, limit, firsts, global_prefix, sketches, reactions_key,
--   reactions, watching_key, watching, watching_until} (keys '' when unused)
--   buckets: {{counts_key, parts_key, bucket, expire_at, {field = value}}}
--   firsts: {digest, first bucket, digest, first bucket, ...} (flat, as HSET takes them)
--   sketches: {{sketch_key, expire_at, {digest}}}; reactions: {user, history, ...} (flat; the
--   script packs each history: `values.decode_history` reads it);
--   watching: {second, sessions, ...} (newest second first): this partition's whole part of the
--   video's sessions watching by second (`keys.watching`); watching_until: the hash's expiry at least
-- Answers, per item, the `views` sum after the write of each bucket whose views moved (for
-- trending): {{bucket, views, ...}, ...}.
local call = redis.call
local CHUNK = 4000

local function variadic(command, key, items, before)
  for i = 1, #items, CHUNK do
    local last = math.min(i + CHUNK - 1, #items)
    if before then call(command, key, before, unpack(items, i, last)) else call(command, key, unpack(items, i, last)) end
  end
end

local function sink(s)
  local part, offset = s[1], s[2]
  local answer = {}
  for _, b in ipairs(s[3]) do
    local counts_key, parts_key, bucket, expire_at, values = b[1], b[2], b[3], b[4], b[5]
    local raw = call('HGET', parts_key, part)
    local old_offset, old = -1, {}
    if raw then
      local stored = cmsgpack.unpack(raw)
      old_offset, old = stored[1], stored[2]
    end
    local views_moved = false
    if old_offset < offset then
      for name, value in pairs(values) do
        local by = value - (old[name] or 0)
        if by ~= 0 then
          call('HINCRBY', counts_key, name, by)
          if name == 'views' then views_moved = true end
        end
      end
      for name, value in pairs(old) do
        if values[name] == nil and value ~= 0 then call('HINCRBY', counts_key, name, -value) end
      end
      call('HSET', parts_key, part, cmsgpack.pack({offset, values}))
      if not raw then  -- this partition's first part of the bucket: the keys' expiry and index entry
        call('PEXPIREAT', counts_key, expire_at)
        call('PEXPIREAT', parts_key, expire_at)
        if s[4] ~= '' then call('ZADD', s[4], bucket, bucket) end
      end
    end
    if views_moved or not raw then
      answer[#answer + 1] = bucket
      answer[#answer + 1] = tonumber(call('HGET', counts_key, 'views') or '0')
    end
  end

  -- Unique viewers: a hash of digest -> first bucket while the video has fewer than `limit`, then a
  -- HyperLogLog under the same key. With several regions (global_prefix: the bucket hashes' prefix)
  -- the hash keeps each viewer's earliest first bucket of any region, and each bucket's `g_uniques`
  -- counts the viewers whose earliest it is (a viewer of two regions counts once).
  local viewers, firsts, global = s[5], s[7], s[8]
  local function fold_when_full()
    if call('HLEN', viewers) >= s[6] then
      local members = call('HKEYS', viewers)
      call('DEL', viewers)
      variadic('PFADD', viewers, members)
    end
  end
  if #firsts > 0 then
    if call('TYPE', viewers).ok == 'string' then
      local digests = {}
      for i = 1, #firsts, 2 do digests[#digests + 1] = firsts[i] end
      variadic('PFADD', viewers, digests)
    elseif global ~= '' then
      for i = 1, #firsts, 2 do
        local f = {firsts[i], firsts[i + 1]}
        local old = call('HGET', viewers, f[1])
        if not old or f[2] < tonumber(old) then
          call('HSET', viewers, f[1], f[2])
          local now_key = global .. string.format('%d', f[2])
          if call('EXISTS', now_key) == 1 then call('HINCRBY', now_key, 'g_uniques', 1) end
          if old and call('EXISTS', global .. old) == 1 then call('HINCRBY', global .. old, 'g_uniques', -1) end
        end
      end
      fold_when_full()
    else
      variadic('HSET', viewers, firsts)
      fold_when_full()
    end
  end
  for _, sketch in ipairs(s[9]) do
    variadic('PFADD', sketch[1], sketch[3])
    call('PEXPIREAT', sketch[1], sketch[2])
  end
  local reactions = s[11]
  for i = 1, #reactions, 2 do call('HSET', s[10], reactions[i], cmsgpack.pack(reactions[i + 1])) end

  -- Presence: this partition's sessions watching by second, replacing its part (decided in Python,
  -- `rules.is_watching`); the hash lives while any partition's part may still be read.
  local watching = s[12]
  if watching ~= '' then
    if #s[13] > 0 then call('HSET', watching, part, cmsgpack.pack(s[13])) else call('HDEL', watching, part) end
    call('PEXPIREAT', watching, s[14], 'NX')
    call('PEXPIREAT', watching, s[14], 'GT')
  end

  return answer
end

local answers = {}
for i, item in ipairs(cmsgpack.unpack(ARGV[1])) do answers[i] = sink(item) end
return answers
