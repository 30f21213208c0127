-- append_plain: appends one or more batches that carry no cursor state to
-- one session: no event has a cause or a lane target, and no served
-- consumer declares a log. Events may target event cursors (each target is a
-- new runnable head). The store coalesces concurrent appends to a session
-- into one call; each batch keeps append's semantics on its own (all or
-- nothing, contiguous indexes, idempotent by event id, the clear fence on
-- its origin), in the order given. It is every producer's hot path, so it
-- is written flat, without the shared includes: Redis runs a script's whole
-- chunk on every call, and each helper, table and string it builds costs
-- server time.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[3]  k, the number of batches
-- then per batch: its event count n and its origin index or '', followed by
--   n events, each: id, type, payload JSON, m (its event-cursor targets),
--   then m cursor-id prefixes '<byte length of consumer>:<consumer>#'
--
-- Replies: { has_pending, outcome... }, one outcome per batch:
--   first index             appended (an integer, not a list)
--   { 'empty' }             n was 0
--   { 'dup', entry... }     every id stored (by an earlier call or an earlier
--                           batch of this one): the stored entries, in order
--   { 'partial', count }    some ids stored; this batch wrote nothing
--   { 'cleared', origin }   origin at or below the clear marker; nothing written
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local k = tonumber(ARGV[3])

-- Where each batch's arguments start, and one MGET (in slices of 1000 keys)
-- for the counter, the clear marker, the typed registry, the live count and
-- the owner of every id.
-- offsets[e] is where the e-th event of the call starts (its id), over
-- all batches; keys[4 + e] is its id record.
local keys = { counter, session .. 'clear', session .. 'typed', session .. 'live' }
local starts, offsets, at, e = {}, {}, 4, 0
for b = 1, k do
  starts[b] = at
  local n = tonumber(ARGV[at])
  at = at + 2
  for _ = 1, n do
    e = e + 1
    offsets[e] = at
    keys[4 + e] = session .. 'id:' .. ARGV[at]
    local m = ARGV[at + 3]
    at = at + (m == '0' and 4 or 4 + tonumber(m))
  end
end
local values
if #keys <= 1000 then
  values = redis.call('MGET', unpack(keys))
else
  values = {}
  for first = 1, #keys, 1000 do
    local part = redis.call('MGET', unpack(keys, first, math.min(first + 999, #keys)))
    for j = 1, #part do values[first + j - 1] = part[j] end
  end
end
-- A collapsed session keeps only its clear marker; an id recorded below
-- the marker is free again.
local boundary = tonumber(values[2] or '0')
local total = tonumber(values[1] or values[2] or '0')
local live = tonumber(values[4] or '0')

local log, now = session .. 'log', ARGV[1]
local typed = values[3] and cjson.decode(values[3]) or nil
local written, writes, indexed = (k > 1) and {} or nil, {}, nil
local heads, pending_fast = nil, false
local served = nil
if ARGV[2] ~= '' then
  served = {}
  for _, entry in ipairs(cjson.decode(ARGV[2])) do served[entry[1]] = true end
end
-- The index that owns the call's e-th id in this lifetime, or false.
local function owner_of(e)
  local owner = written and written[ARGV[offsets[e]]]
  if not owner then
    owner = values[4 + e]
    if owner and tonumber(owner) < boundary then owner = false end
  end
  return owner
end
local replies = { false }
local key_at = 4
for b = 1, k do
  local start = starts[b]
  local n, origin = tonumber(ARGV[start]), ARGV[start + 1]
  local found = 0
  for i = 1, n do
    if owner_of(key_at - 4 + i) then found = found + 1 end
  end
  local reply
  if n == 0 then
    reply = { 'empty' }
  elseif found == n then
    reply = { 'dup' }
    for i = 1, n do
      local entry = owner_of(key_at - 4 + i) .. '-0'
      reply[1 + i] = redis.call('XRANGE', log, entry, entry)[1]
    end
  elseif found > 0 then
    reply = { 'partial', string.format('%d', found) }
  elseif origin ~= '' and tonumber(origin) <= boundary then
    reply = { 'cleared', origin }
  else
    -- The entries; their id records and the counter go in one MSET. Events
    -- of a type some log cursor reads also join that type's index.
    -- An appended batch's outcome is just its first index, an integer.
    reply = total + 1
    for i = 1, n do
      local o = offsets[key_at - 4 + i]
      local idx = string.format('%d', total + i)
      redis.call('XADD', log, idx .. '-0', 'id', ARGV[o], 'type', ARGV[o + 1],
        'payload', ARGV[o + 2], 'created_at', now, 'cause', '')
      if written then written[ARGV[o]] = idx end
      writes[#writes + 1] = keys[key_at + i]
      writes[#writes + 1] = idx
      -- Each event-cursor target is a new runnable head scoring its index.
      for t = 1, tonumber(ARGV[o + 3]) do
        local prefix = ARGV[o + 3 + t]
        heads = heads or {}
        heads[#heads + 1] = total + i
        heads[#heads + 1] = prefix .. idx
        live = live + 1
        if not pending_fast then
          if served == nil then
            pending_fast = true
          else
            local colon = string.find(prefix, ':', 1, true)
            pending_fast = served[string.sub(prefix, colon + 1, -2)] == true
          end
        end
      end
      local entry = typed and typed[ARGV[o + 1]]
      if entry then
        indexed = indexed or {}
        local list = indexed[ARGV[o + 1]]
        if not list then
          list = {}
          indexed[ARGV[o + 1]] = list
        end
        list[#list + 1] = total + i
        list[#list + 1] = idx
        entry[2] = total + i
      end
    end
    total = total + n
  end
  replies[b + 1] = reply
  key_at = key_at + n
end

if #writes > 0 then
  writes[#writes + 1] = counter
  writes[#writes + 1] = string.format('%d', total)
  if heads then
    for first = 1, #heads, 1000 do
      redis.call('ZADD', session .. 'runnable', unpack(heads, first, math.min(first + 999, #heads)))
    end
    writes[#writes + 1] = session .. 'live'
    writes[#writes + 1] = string.format('%d', live)
  end
  if indexed then
    for name, list in pairs(indexed) do
      local hex = string.gsub(name, '.', function(c) return string.format('%02x', string.byte(c)) end)
      for first = 1, #list, 1000 do
        redis.call('ZADD', session .. 'type:' .. hex, unpack(list, first, math.min(first + 999, #list)))
      end
    end
    writes[#writes + 1] = session .. 'typed'
    writes[#writes + 1] = cjson.encode(typed)
  end
  for first = 1, #writes, 1000 do
    redis.call('MSET', unpack(writes, first, math.min(first + 999, #writes)))
  end
end

-- '1' when a served consumer has a live head: with every consumer served,
-- the live count; else newest heads first (a retired consumer's backlog is
-- older than the work a deployment serves).
local pending = pending_fast and '1' or '0'
if pending == '0' and live > 0 then
  if served == nil then
    pending = '1'
  else
    local ready, offset = session .. 'runnable', 0
    while pending == '0' do
      local page = redis.call('ZREVRANGEBYSCORE', ready, '+inf', 1, 'LIMIT', offset, 64)
      for _, cid in ipairs(page) do
        local colon = string.find(cid, ':', 1, true)
        local size = tonumber(string.sub(cid, 1, colon - 1))
        if served[string.sub(cid, colon + 1, colon + size)] then pending = '1' end
      end
      if #page < 64 then break end
      offset = offset + 64
    end
  end
end
replies[1] = pending
return replies
