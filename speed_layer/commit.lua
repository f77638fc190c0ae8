-- The commit of one micro-batch of one partition (speed_layer/partition_store.py). It decides
-- nothing about counting: it refuses a worker that no longer owns the partition, skips what is
-- committed already, appends the batch's changelog entry and moves the offset, atomically.
-- KEYS[1]: the offset; ARGV: the owner, log and snapshot keys (the same hash tag: the partition's),
-- the owner generation, the last offset of the batch, the changelog entry, and a snapshot
-- (optional, taken after the batch): it replaces the changelog.
-- Answers {1, offset} when committed, {0, stored offset} when already committed, {-1, owner} when
-- another worker owns the partition now.
local owner_key, log_key, snapshot_key = ARGV[1], ARGV[2], ARGV[3]
local owner = tonumber(redis.call('GET', owner_key) or '0')
if owner ~= tonumber(ARGV[4]) then return {-1, owner} end
local stored = tonumber(redis.call('GET', KEYS[1]) or '-1')
local last = tonumber(ARGV[5])
if last <= stored then return {0, stored} end
if ARGV[7] then
  redis.call('SET', snapshot_key, ARGV[7])
  redis.call('DEL', log_key)
end
redis.call('RPUSH', log_key, ARGV[6])
redis.call('SET', KEYS[1], ARGV[5])
return {1, last}
