-- util: helpers every script may use. No keys are touched here.
--
-- CLEAR_TYPE is the reserved event type of a clear marker; Go's
-- a2redis.ClearEventType must spell the same (a test checks).
-- CHUNK is how many consecutive indexes share one heads:<chunk> hash; Go's
-- keys.HeadChunkSize must match (a test checks).
local CLEAR_TYPE = 'a2.clear'
local CHUNK = 1000
-- HELD marks a held head in the runnable set (keys.HeldOffset): its score
-- is HELD + the time its claim lapses or its retry hold ends, so the scores
-- 1 … HELD-1 are exactly the heads free to claim, and the held ones sort by
-- when they free up.
local HELD = 1125899906842624
-- Every write to a heads chunk also sets its pin field, CHUNK_PIN (a name
-- that is no row's), to CHUNK_PIN_VALUE (keys.ChunkPin, keys.ChunkPinValue):
-- a value longer than Redis's default hash-max-listpack-value (64 bytes)
-- keeps the hash in hashtable encoding. A chunk holds hundreds of fields,
-- and in a listpack every field read or written is a scan of the whole hash.
local CHUNK_PIN = '~'
local CHUNK_PIN_VALUE = 'hashtable-encoding-pin-hashtable-encoding-pin-hashtable-encoding-pin'

-- Integers as decimal text. tostring() and `..` format numbers with %.14g on
-- Redis, which turns large integers into exponent notation.
local function int(n) return string.format('%d', n) end

-- Runs a variadic command in calls of at most 1000 arguments (unpack is
-- bounded by the Lua stack: ~8000 values on Redis, ~5100 on gopher-lua) and
-- concatenates table replies (a reply that is not a table gives {}). The
-- slice size is even, so field/value and score/member pairs stay together.
-- Nothing is sent for an empty list; a list that fits in one call is not
-- copied.
local function sliced(command, key, args)
  local n = #args
  if n <= 1000 then
    if n == 0 then return {} end
    local reply
    if key then
      reply = redis.call(command, key, unpack(args))
    else
      reply = redis.call(command, unpack(args))
    end
    return type(reply) == 'table' and reply or {}
  end
  local results = {}
  for first = 1, n, 1000 do
    local last = math.min(first + 999, n)
    local reply
    if key then
      reply = redis.call(command, key, unpack(args, first, last))
    else
      reply = redis.call(command, unpack(args, first, last))
    end
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do results[#results + 1] = value end
    end
  end
  return results
end

-- The group of index idx's heads chunk in `groups` (by chunk number), made
-- and appended to `order` the first time: { key, members = {}, names = {} }.
-- The flat scripts gather their rows' fields per chunk with it.
local function chunk_group(session, groups, order, idx)
  local number = math.floor((idx - 1) / CHUNK)
  local group = groups[number]
  if not group then
    group = { key = session .. 'heads:' .. int(number), members = {}, names = {} }
    groups[number] = group
    order[#order + 1] = group
  end
  return group
end
