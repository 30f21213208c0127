--@include util
-- append_targeted: append_one for an event with event-cursor targets (no
-- cause, no lane target, no served log consumer): one batch of one event,
-- each target a new runnable head, the live count and the ready index's
-- record kept as append_plain keeps them, in one MGET, the XADD, one ZADD
-- and one MSET (and the record's SET when it changes). A script of its own
-- so that append_one, the untargeted case, carries none of this (the ready
-- helpers alone cost it ~2k instructions per call).
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  the event id (a generated one included)
-- ARGV[3]  type
-- ARGV[4]  payload JSON
-- ARGV[5]  origin index, or ''
-- ARGV[6]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[7]  the first 24 digits of an explicit id of the generated shape
--          (32 lower-case hex digits), whose block is looked up too; else ''
-- ARGV[8…] the event's targets, each a cursor-id prefix
--          '<byte length of consumer>:<consumer>#' (at least one)
--
-- Replies: append_one's, and when the ready index must learn of the new
-- heads, { the integer, ready mark } (util's ready_mark) instead of the
-- integer.
local call = redis.call
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local id, typ = ARGV[2], ARGV[3]
local owner_key = session .. 'id:' .. id
local origin, served, block = ARGV[5], ARGV[6], ARGV[7]
local targets = #ARGV - 7
-- values[7]: the ready-index record (listed); values[8]: the id block's
-- record, when there is a block to look up.
local values
if block == '' then
  values = call('MGET', counter, session .. 'clear', session .. 'typed', session .. 'live', session .. 'followed', owner_key,
    session .. 'listed')
else
  values = call('MGET', counter, session .. 'clear', session .. 'typed', session .. 'live', session .. 'followed', owner_key,
    session .. 'listed', session .. 'ids:' .. block)
end
-- (tonumber only on what is there: a missing key is false.)
local boundary = values[2] and tonumber(values[2]) or 0
local bits = values[5] and 2 or 0
local had_live = values[4] and values[4] ~= '0'
local names = nil
if served ~= '' then
  names = {}
  for _, entry in ipairs(cjson.decode(served)) do names[entry[1]] = true end
end
-- A new head of a served consumer is pending.
for t = 8, #ARGV do
  local prefix = ARGV[t]
  if bits % 2 == 0 and (not names or names[string.sub(prefix, string.find(prefix, ':', 1, true) + 1, -2)]) then
    bits = bits + 1
  end
end
if bits % 2 == 0 and had_live then
  if not names then
    bits = bits + 1
  else
    -- Newest heads first (a retired consumer's backlog is older than the
    -- work a deployment serves).
    local ready, offset = session .. 'runnable', 0
    while bits % 2 == 0 do
      local page = call('ZREVRANGEBYSCORE', ready, '+inf', 1, 'LIMIT', offset, 64)
      for _, cid in ipairs(page) do
        local colon = string.find(cid, ':', 1, true)
        local size = tonumber(string.sub(cid, 1, colon - 1))
        if names[string.sub(cid, colon + 1, colon + size)] and bits % 2 == 0 then bits = bits + 1 end
      end
      if #page < 64 then break end
      offset = offset + 64
    end
  end
end

-- The index that owns the id in this lifetime, if any: its id key, else
-- the block of its first 24 digits (include/session's block_of).
local owner = values[6]
if not owner and values[8] then
  local first, n = string.match(values[8], '^(%d+):(%d+)$')
  local p = tonumber(string.sub(id, 25), 16)
  if first and p < tonumber(n) then owner = tonumber(first) + p end
end
if owner and tonumber(owner) >= boundary then
  local entry = string.format('%d-0', owner)
  return { 'dup', bits, call('XRANGE', session .. 'log', entry, entry)[1] }
end
if origin ~= '' and tonumber(origin) <= boundary then
  return { 'cleared', bits }
end

local index = tonumber(values[1] or values[2] or 0) + 1
local text = string.format('%d', index)
-- An uncaused event's entry has no cause field (readers take a missing
-- cause as none).
call('XADD', session .. 'log', text .. '-0', 'id', id, 'type', typ,
  'payload', ARGV[4], 'created_at', ARGV[1])
local registry, entry = nil, nil
if values[3] then
  -- A type some log cursor reads: the event joins that type's index.
  registry = cjson.decode(values[3])
  entry = registry[typ]
end
-- Each event-cursor target is a new runnable head scoring its index.
local runnable = session .. 'runnable'
if targets == 1 then
  call('ZADD', runnable, index, ARGV[8] .. text)
else
  local heads = {}
  for t = 8, #ARGV do
    heads[#heads + 1] = index
    heads[#heads + 1] = ARGV[t] .. text
  end
  call('ZADD', runnable, unpack(heads))
end
local live = int((values[4] and tonumber(values[4]) or 0) + targets)
if entry then
  local hex = string.gsub(typ, '.', function(c) return string.format('%02x', string.byte(c)) end)
  call('ZADD', session .. 'type:' .. hex, index, text)
  entry[2] = index
  call('MSET', owner_key, text, counter, text, session .. 'live', live, session .. 'typed', cjson.encode(registry))
else
  call('MSET', owner_key, text, counter, text, session .. 'live', live)
end
-- New heads: the ready index may have to learn of them.
local update = ready_mark(session, tonumber(ARGV[1]), false, values[7] or false, true, true)
if update == READY_MARK then return index * 4 + bits end
return { index * 4 + bits, update }
