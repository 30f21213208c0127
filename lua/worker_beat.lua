--@include util
-- worker_beat: registers, refreshes or removes one worker process in the
-- prefix's worker registry (keys.Worker, keys.Workers), and prunes a bounded
-- number of members whose records expired long ago from the listing (a
-- member whose record expired is kept a while, its score the expiry: the
-- views tell a stopped worker's claims from a live one's by it).
--
-- KEYS[1]  the worker's record (<prefix>:{w}:worker:<id>)
-- KEYS[2]  the listing zset (<prefix>:{w}:workers)
-- KEYS[3]  the registry's sentinel, never written (keys.WorkersSentinel)
-- ARGV[1]  the worker id
-- ARGV[2]  now (epoch ms)
-- ARGV[3]  the record's TTL in ms, or '0' to deregister
-- ARGV[4]  the record (JSON), unused when deregistering
-- ARGV[5]  how many expired members to prune at most
-- ARGV[6]  the members whose records expired before this time (epoch ms)
--          are pruned
--
-- Reply: the number of expired members pruned.
local record, listing, id = KEYS[1], KEYS[2], ARGV[1]
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
-- The read first (everything that can fail comes before the first write):
-- the expired members, this worker's own entry aside (it is written below).
local expired = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', listing, '-inf', '(' .. ARGV[6], 'LIMIT', 0, tonumber(ARGV[5]))) do
  if member ~= id then expired[#expired + 1] = member end
end
if ttl > 0 then
  redis.call('SET', record, ARGV[4], 'PX', ttl)
  redis.call('ZADD', listing, now + ttl, id)
else
  redis.call('DEL', record)
  redis.call('ZREM', listing, id)
end
sliced('ZREM', listing, expired)
return #expired
