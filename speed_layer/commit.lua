-- The commit of one micro-batch of one partition (speed_layer/partition_store.py). It decides
-- nothing about counting: it refuses a worker that no longer owns the partition, skips what is
-- committed already, appends the batch's changelog entry and moves the offset, atomically.
-- KEYS[1]: the offset; ARGV: the owner, log, snapshot and sketches keys (the same hash tag: the
-- partition's), the owner generation, the last offset of the batch, the changelog entry, the
-- batch's sketch digests (kept for the last batch only: a restore sinks the last entry again),
-- '1' when the entry may keep the stored offset (changes without a new record: a hand-off taken
-- over), and a snapshot (optional, taken after the batch): it replaces the changelog.
-- Answers {1, offset} when committed, {0, stored offset} when already committed, {-1, owner} when
-- another worker owns the partition now.
local owner_key, log_key, snapshot_key, sketches_key = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local owner = tonumber(redis.call('GET', owner_key) or '0')
if owner ~= tonumber(ARGV[5]) then return {-1, owner} end
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local last = tonumber(ARGV[6])
if last < stored or (last == stored and ARGV[9] ~= '1') then return {0, stored} end
if ARGV[10] then
  redis.call('SET', snapshot_key, ARGV[10])
  redis.call('DEL', log_key)
end
redis.call('RPUSH', log_key, ARGV[7])
redis.call('SET', sketches_key, ARGV[8])
redis.call('SET', KEYS[1], ARGV[6])
return {1, last}
