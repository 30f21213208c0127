-- worker_beat: registers, refreshes or removes one worker process in the
-- prefix's worker registry (keys.Worker, keys.Workers), and prunes a bounded
-- number of members whose records have expired from the listing.
--
-- KEYS[1]  the worker's record (<prefix>:{w}:worker:<id>)
-- KEYS[2]  the listing zset (<prefix>:{w}:workers)
-- KEYS[3]  the registry's sentinel, never written (keys.WorkersSentinel)
-- ARGV[1]  the worker id
-- ARGV[2]  now (epoch ms)
-- ARGV[3]  the record's TTL in ms, or '0' to deregister
-- ARGV[4]  the record (JSON), unused when deregistering
-- ARGV[5]  how many expired members to prune at most
--
-- Reply: the number of expired members pruned.
local record, listing, id = KEYS[1], KEYS[2], ARGV[1]
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', record, ARGV[4], 'PX', ttl)
  redis.call('ZADD', listing, now + ttl, id)
else
  redis.call('DEL', record)
  redis.call('ZREM', listing, id)
end
local expired = redis.call('ZRANGEBYSCORE', listing, '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[5]))
if #expired > 0 then redis.call('ZREM', listing, unpack(expired)) end
return #expired
