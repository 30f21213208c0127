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

-- The ready index (keys.Ready, one zset per shard, in other slots) lists
-- every session with work and the time it has work from. A script cannot
-- write it, so a write that changes a session's runnable set ends with
-- ready_mark, which keeps the session's own record of what it told the
-- index (the `listed` key: "<version>:<ready at>:<free>", ready at empty
-- for no work, free '1' when a head was free to claim) and returns
-- READY_MARK .. "<version>:<ready at>:<due>" when that changed (READY_MARK
-- alone when not); the store pops it off the reply and sends the update to
-- the session's shard. `due` is '1' when the session has work now and had
-- none before: the shard announces it on its work channel.
--
-- The session has work from: with a free head, the time it got work (kept
-- while it has free heads, so the oldest waiting sessions sort first) or
-- now when `bump` is set (a claim that leaves free heads moves the session
-- behind the others: round robin); else the earliest end of a claim or
-- retry hold (or an earlier end it had, not yet passed: see below); else
-- it has none.
--
-- `listed` is the listed key's value as the script read it (false: none;
-- nil: read it here). `keeps_free`: the write made no free head un-free
-- (every write but a claim and a clear); `added_free`: it made a head free.
-- `holds`: the earliest end of a hold the write set (false: it set none;
-- nil: not known); `live_after`: the session's live heads after the write
-- (nil: not known). With those, a session that had a free head, or got
-- one, or stays held, or has none left, needs no read of its runnable set.
local READY_MARK = '\1R'
local function ready_mark(session, now, bump, listed, keeps_free, added_free, holds, live_after)
  local key = session .. 'listed'
  if listed == nil then listed = redis.call('GET', key) end
  local version, was, free = 0, false, false
  if listed then
    local v, a, f = string.match(listed, '^(%d+):(%d*):?(%d?)$')
    version, was, free = tonumber(v), tonumber(a) or false, f == '1'
  end
  local at, now_free
  if live_after == 0 then
    -- No live head left: no work, nothing to read.
    at, now_free = false, false
  elseif keeps_free and free then
    return READY_MARK
  elseif keeps_free and holds ~= nil and not added_free and not free and was and was > now and
         (live_after or 0) > 0 and (holds == false or holds >= was) then
    -- Held before and a head still live, none freed, no hold set earlier
    -- than the listed end: the earlier end stays listed (see below), so
    -- nothing to read.
    return READY_MARK
  elseif keeps_free and added_free then
    at, now_free = (was and was <= now) and was or now, true
  else
    local first = redis.call('ZRANGEBYSCORE', session .. 'runnable', '(0', '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    at, now_free = false, false
    if #first > 0 then
      local score = tonumber(first[2])
      if score >= HELD then
        at = score - HELD
      elseif bump or not was or was > now then
        at, now_free = now, true
      else
        at, now_free = was, true
      end
    end
  end
  -- A held session whose earliest hold end moved later (a lease renewed,
  -- a lane's next head claimed with a new lease) keeps its earlier time:
  -- listing work early is safe (a claim then finds the session busy and
  -- lists it again from its true state), and a lane completed and claimed
  -- on in one call then costs no index update per event.
  if at and was and not now_free and not free and was > now and at > was then at = was end
  if at == was and now_free == free then return READY_MARK end
  local text = at and int(at) or ''
  if at ~= was then version = version + 1 end
  redis.call('SET', key, int(version) .. ':' .. text .. ':' .. (now_free and '1' or '0'))
  if at == was then return READY_MARK end
  local due = at and at <= now and not (was and was <= now)
  return READY_MARK .. int(version) .. ':' .. text .. ':' .. (due and '1' or '0')
end
