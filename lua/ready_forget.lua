--@include layout
-- ready_forget: the ready index forgets a dropped session (its entry, its
-- version and its dead-index entry), unless an update newer than the drop's came since: a fresh
-- session's first update carries a version above any its past held (see
-- util's ready_mark), and it stays.
--
-- KEYS[1]  the shard's index zset (<prefix>:{r<n>}:ready); its versions hash
--          (ready-v) and dead index (dead, dead-n) are derived from it
-- KEYS[2]  the shard's sentinel, never written (keys.Ready.Sentinel)
-- ARGV[1]  session
-- ARGV[2]  the version the session's listed record held when it was dropped
--
-- Reply: 1 when the shard forgot the session, 0 when a newer update stays.
local index = KEYS[1]
local base = string.sub(index, 1, READY_CUT)
local versions = base .. READY_VERSIONS
local dead_index, dead_counts = base .. READY_DEAD, base .. READY_DEAD_COUNTS
-- The reads first: a key of the wrong type fails the script before a write.
redis.call('ZSCORE', index, ARGV[1])
local listed_dead = redis.call('ZSCORE', dead_index, ARGV[1])
redis.call('HEXISTS', dead_counts, ARGV[1])
local known = redis.call('HGET', versions, ARGV[1])
if known and tonumber(known) > tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', versions, ARGV[1])
redis.call('ZREM', index, ARGV[1])
if listed_dead then
  redis.call('ZREM', dead_index, ARGV[1])
  redis.call('HDEL', dead_counts, ARGV[1])
end
return 1
