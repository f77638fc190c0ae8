-- The commit of one micro-batch of one partition (speed_layer/state/partition_store.py). It decides
-- nothing about counting: it refuses a worker that no longer owns the partition, skips what is
-- committed already, appends the batch's changelog entry and moves the offset, atomically; and it
-- stores the batch's chunk of a snapshot being built (speed_layer/state/snapshot.py).
-- KEYS[1]: the offset; ARGV: the owner, log, snapshot and sketches keys (the same hash tag: the
-- partition's), the owner generation, the last offset of the batch, the changelog entry, the
-- batch's sketch digests (kept for the last batch only: a restore sinks the last entry again),
-- '1' when the entry may keep the stored offset (changes without a new record: a hand-off taken
-- over), the keys of the snapshot's chunks, of the chunks being built and of the build's mark;
-- then, when the batch carries a chunk: its index in the build, '1' when it is the last, its bytes.
-- Chunk 0 begins a build: it marks how many changelog entries come before this batch's. A chunk is
-- stored only if it is the next one of the build; the last one makes the built chunks the snapshot
-- and drops the changelog entries before the mark (a restore loads the chunks, then the entries
-- from the build's first batch's on).
-- Answers {1, offset, chunk} when committed (chunk: 0 none or refused, 1 stored, 2 stored and the
-- snapshot switched), {0, stored offset} when already committed, {-1, owner} when another worker
-- owns the partition now.
local owner_key, log_key, snapshot_key, sketches_key = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local chunks_key, building_key, mark_key = ARGV[10], ARGV[11], ARGV[12]
local owner = tonumber(redis.call('GET', owner_key) or '0')
if owner ~= tonumber(ARGV[5]) then return {-1, owner} end
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local last = tonumber(ARGV[6])
if last < stored or (last == stored and ARGV[9] ~= '1') then return {0, stored} end
local chunk = 0
if ARGV[13] then
  local index = tonumber(ARGV[13])
  if index == 0 then
    redis.call('DEL', building_key)
    redis.call('SET', mark_key, redis.call('LLEN', log_key))
  end
  if redis.call('EXISTS', mark_key) == 1 and redis.call('LLEN', building_key) == index then
    redis.call('RPUSH', building_key, ARGV[15])
    chunk = 1
  end
end
redis.call('RPUSH', log_key, ARGV[7])
redis.call('SET', sketches_key, ARGV[8])
redis.call('SET', KEYS[1], ARGV[6])
if chunk == 1 and ARGV[14] == '1' then
  local before = tonumber(redis.call('GET', mark_key))
  redis.call('RENAME', building_key, chunks_key)
  redis.call('DEL', snapshot_key, mark_key)
  if before > 0 then redis.call('LTRIM', log_key, before, -1) end
  chunk = 2
end
return {1, last, chunk}
