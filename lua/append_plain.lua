-- append_plain: append for a batch that carries no cursor work — no event
-- has targets or a cause, and no served consumer declares a log. Same ARGV
-- and replies as append for such a batch. It is the hot path of every
-- producer, so it is written flat, without the shared includes: Redis runs
-- a script's whole chunk on every call, and each helper, table and string
-- it builds costs server time.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- ARGV     as append: now, n, served consumers, origin index or '', then per
--          event: id, type, payload JSON, '' (cause), '' (targets)
--
-- Replies: as append, except never 'superseded' or 'index':
--   { 'ok', first index, has_pending } | { 'empty', has_pending } |
--   { 'dup', has_pending, entry... } | { 'partial', count } | { 'cleared', origin }
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local n = tonumber(ARGV[2])

-- One MGET (in slices of 1000 keys) for the counter, the clear marker, the
-- typed registry, the live count and the owner of each id.
local keys = { counter, session .. 'clear', session .. 'typed', session .. 'live' }
for i = 1, n do keys[4 + i] = session .. 'id:' .. ARGV[(i - 1) * 5 + 5] end
local values
if #keys <= 1000 then
  values = redis.call('MGET', unpack(keys))
else
  values = {}
  for first = 1, #keys, 1000 do
    local part = redis.call('MGET', unpack(keys, first, math.min(first + 999, #keys)))
    for k = 1, #part do values[first + k - 1] = part[k] end
  end
end
-- A collapsed session keeps only its clear marker.
local boundary = tonumber(values[2] or '0')
local total = tonumber(values[1] or values[2] or '0')
local live = tonumber(values[4] or '0')

-- '1' when a served consumer has a live head: with every consumer served,
-- the live count; else newest heads first (a retired consumer's backlog is
-- older than the work a deployment serves).
local function has_pending()
  if live <= 0 then return '0' end
  if ARGV[3] == '' then return '1' end
  local served = {}
  for _, entry in ipairs(cjson.decode(ARGV[3])) do served[entry[1]] = true end
  local ready, offset = session .. 'runnable', 0
  while true do
    local page = redis.call('ZREVRANGEBYSCORE', ready, '+inf', 1, 'LIMIT', offset, 64)
    for _, cid in ipairs(page) do
      local colon = string.find(cid, ':', 1, true)
      local size = tonumber(string.sub(cid, 1, colon - 1))
      if served[string.sub(cid, colon + 1, colon + size)] then return '1' end
    end
    if #page < 64 then return '0' end
    offset = offset + 64
  end
end

if n == 0 then return { 'empty', has_pending() } end
-- An id recorded below the clear marker is free again.
local found = 0
for i = 1, n do
  local owner = values[4 + i]
  if owner and tonumber(owner) >= boundary then found = found + 1 end
end
if found == n then
  local reply = { 'dup', has_pending() }
  for i = 1, n do
    local at = values[4 + i] .. '-0'
    reply[2 + i] = redis.call('XRANGE', session .. 'log', at, at)[1]
  end
  return reply
end
if found > 0 then return { 'partial', string.format('%d', found) } end
if ARGV[4] ~= '' and tonumber(ARGV[4]) <= boundary then return { 'cleared', ARGV[4] } end

-- The entries, and their id records and the counter in one MSET. Events of
-- a type some log cursor reads also join that type's index.
local log, now = session .. 'log', ARGV[1]
local typed = values[3] and cjson.decode(values[3]) or nil
local indexed
local writes = {}
for i = 1, n do
  local o = (i - 1) * 5 + 4
  local idx = string.format('%d', total + i)
  redis.call('XADD', log, idx .. '-0', 'id', ARGV[o + 1], 'type', ARGV[o + 2],
    'payload', ARGV[o + 3], 'created_at', now, 'cause', '')
  writes[2 * i - 1] = keys[4 + i]
  writes[2 * i] = idx
  local entry = typed and typed[ARGV[o + 2]]
  if entry then
    indexed = indexed or {}
    local list = indexed[ARGV[o + 2]]
    if not list then
      list = {}
      indexed[ARGV[o + 2]] = list
    end
    list[#list + 1] = total + i
    list[#list + 1] = idx
    entry[2] = total + i
  end
end
writes[2 * n + 1] = counter
writes[2 * n + 2] = string.format('%d', total + n)
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
return { 'ok', string.format('%d', total + 1), has_pending() }
