-- ready_index: applies sessions' updates to one shard of the ready index
-- (keys.Ready). A session's update is applied only when its version is newer
-- than the one the shard last applied for it, so updates that arrive out of
-- order (two workers writing one session, a repair racing a write) end in
-- the newest state: a claim that found a session settled can never remove
-- it after an append that gave it work.
--
-- KEYS[1]  the shard's index zset (<prefix>:{r<n>}:ready); its versions hash
--          (ready-v) is derived from it
-- KEYS[2]  the shard's sentinel, never written (keys.Ready.Sentinel)
-- ARGV[1]  the shard's work channel, or '' to announce nothing
-- ARGV[2]  '1' to announce with SPUBLISH, else PUBLISH
-- then per update: session, version, ready at (epoch ms; '' for no work),
--   due ('1': the session has work now and had none before: announce it)
--
-- Reply: the number of updates applied.
local index = KEYS[1]
local versions = string.sub(index, 1, -6) .. 'ready-v'
local publish = ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH'
local applied = 0
for i = 3, #ARGV, 4 do
  local session, version = ARGV[i], ARGV[i + 1]
  local known = redis.call('HGET', versions, session)
  if not known or tonumber(known) < tonumber(version) then
    redis.call('HSET', versions, session, version)
    if ARGV[i + 2] == '' then
      redis.call('ZREM', index, session)
    else
      redis.call('ZADD', index, ARGV[i + 2], session)
    end
    if ARGV[i + 3] == '1' and ARGV[1] ~= '' then redis.call(publish, ARGV[1], session) end
    applied = applied + 1
  end
end
return applied
