--@include layout
-- ready_index: applies sessions' updates to one shard of the ready index
-- (keys.Ready) and of its dead index (keys.Ready.Dead and DeadCounts). A
-- session's update is applied only when its version is newer than the one
-- the shard last applied for it, so updates that arrive out of order (two
-- workers writing one session, a repair racing a write) end in the newest
-- state: a claim that found a session settled can never remove it after an
-- append that gave it work, and a redrive's update that arrives late never
-- lists dead letters a newer write saw go.
--
-- KEYS[1]  the shard's index zset (<prefix>:{r<n>}:ready); its versions hash
--          (ready-v) and dead index (dead, dead-n) are derived from it
-- KEYS[2]  the shard's sentinel, never written (keys.Ready.Sentinel)
-- ARGV[1]  the shard's work channel, or '' to announce nothing
-- ARGV[2]  '1' to announce with SPUBLISH, else PUBLISH
-- then per update: session, version, ready at (epoch ms; '' for no work),
--   due ('1': the session has work now and had none before: announce it),
--   dead ('' for no change, as for a session that holds no dead letters;
--   '0' for none left; else "<count>,<since>,<complete>,<consumers>", see
--   keys.Session.Listed)
--
-- Reply: the number of updates applied.
local index = KEYS[1]
local base = string.sub(index, 1, READY_CUT)
local versions = base .. READY_VERSIONS
local dead_index, dead_counts = base .. READY_DEAD, base .. READY_DEAD_COUNTS
local publish = ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH'
-- The dead states, parsed (and the dead keys' types checked) before any
-- write: only updates of sessions whose dead letters changed or that hold
-- some pay for it.
local deads = {}
for i = 3, #ARGV, 5 do
  local d = ARGV[i + 4]
  if d == '0' then
    deads[i] = false
  elseif d ~= '' then
    local count, since, rest = string.match(d, '^(%d+),(%d+),(.*)$')
    if count then deads[i] = { since, count .. ',' .. rest } end
  end
end
if next(deads) ~= nil then
  redis.call('ZSCORE', dead_index, '')
  redis.call('HEXISTS', dead_counts, '')
end
local applied = 0
for i = 3, #ARGV, 5 do
  local session, version = ARGV[i], ARGV[i + 1]
  local known = redis.call('HGET', versions, session)
  if not known or tonumber(known) < tonumber(version) then
    redis.call('HSET', versions, session, version)
    if ARGV[i + 2] == '' then
      redis.call('ZREM', index, session)
    else
      redis.call('ZADD', index, ARGV[i + 2], session)
    end
    local dead = deads[i]
    if dead then
      redis.call('ZADD', dead_index, dead[1], session)
      redis.call('HSET', dead_counts, session, dead[2])
    elseif dead == false then
      redis.call('ZREM', dead_index, session)
      redis.call('HDEL', dead_counts, session)
    end
    if ARGV[i + 3] == '1' and ARGV[1] ~= '' then redis.call(publish, ARGV[1], session) end
    applied = applied + 1
  end
end
return applied
