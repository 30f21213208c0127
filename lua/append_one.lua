-- append_one: the commonest append, on its own: one batch of one event
-- with no cause and no targets, while no served consumer declares a log.
-- append_plain's semantics for that batch (idempotent by event id, the
-- clear fence on its origin, the type index of a typed log), in fewer
-- steps: on Redis 7.0 every value that crosses between Lua and Redis, every
-- string a script builds and an array reply each cost thousands of server
-- instructions, so this script builds five strings, reads one MGET, and
-- replies a single integer when it appends.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  the event id (a generated one included)
-- ARGV[3]  type
-- ARGV[4]  payload JSON
-- and, each optional (absent when it and those after it are empty; every
-- ARGV value costs the server about a thousand instructions):
-- ARGV[5]  origin index, or ''
-- ARGV[6]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[7]  the first 24 digits of an explicit id of the generated shape
--          (32 lower-case hex digits), whose block is looked up too; else ''
--
-- Replies:
--   4 × index + 2 × followed + pending   appended at index (an integer)
--   { 'dup', bits, entry }               the id is stored: its entry
--   { 'cleared', bits }                  origin at or below the clear marker
-- where bits = 2 × followed + pending: pending is 1 when a served consumer
-- has a live head, followed 1 when a reader follows the session (its
-- `followed` key is set: the store publishes the wake-up only then).
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local id, typ = ARGV[2], ARGV[3]
local owner_key = session .. 'id:' .. id
local origin, served, block = ARGV[5] or '', ARGV[6] or '', ARGV[7] or ''
local call = redis.call
local values
if block == '' then
  values = call('MGET', counter, session .. 'clear', session .. 'typed', session .. 'live', session .. 'followed', owner_key)
else
  values = call('MGET', counter, session .. 'clear', session .. 'typed', session .. 'live', session .. 'followed', owner_key,
    session .. 'ids:' .. block)
end
-- (tonumber only on what is there: a missing key is false.)
local boundary = values[2] and tonumber(values[2]) or 0
local bits = values[5] and 2 or 0
if values[4] and values[4] ~= '0' then
  if served == '' then
    bits = bits + 1
  else
    -- Newest heads first (a retired consumer's backlog is older than the
    -- work a deployment serves).
    local names = {}
    for _, entry in ipairs(cjson.decode(served)) do names[entry[1]] = true end
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
if not owner and values[7] then
  local first, n = string.match(values[7], '^(%d+):(%d+)$')
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
local typed = values[3]
if typed then
  -- A type some log cursor reads: the event joins that type's index.
  local registry = cjson.decode(typed)
  local entry = registry[typ]
  if entry then
    local hex = string.gsub(typ, '.', function(c) return string.format('%02x', string.byte(c)) end)
    call('ZADD', session .. 'type:' .. hex, index, text)
    entry[2] = index
    call('MSET', owner_key, text, counter, text, session .. 'typed', cjson.encode(registry))
    return index * 4 + bits
  end
end
call('MSET', owner_key, text, counter, text)
return index * 4 + bits
