--@include util
-- claim_fast: the common claim, written flat (no session or cursor
-- includes: a script pays for every table, string and helper it builds,
-- and building the general claim's helpers alone costs more than a small
-- claim). It excludes nothing; it claims only
-- when no hold has ended (no lapsed claim to take over, no retry hold
-- over) and the lowest free heads were never claimed before; it answers
-- busy or settled when no head is free and no hold has ended (with every
-- consumer served). With served consumers (the declared ones) it claims
-- when the lowest free heads are all theirs. Anything else — and a request
-- with exclusions, which the store never sends here — gets { 'general' }
-- with nothing written: run claim. Whatever it claims, claim would claim
-- the same way.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV     as claim's; ARGV[8] (excluded count) must be '0'
--
-- Replies: as claim's 'claimed' (every head fresh: { consumer, kind,
-- index }), 'busy' and 'settled' replies, or { 'general' }.
if ARGV[8] ~= '0' then return { 'general' } end
local served = nil
if ARGV[5] ~= '' then
  served = {}
  for _, entry in ipairs(cjson.decode(ARGV[5])) do served[entry[1]] = true end
end
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local ready = session .. 'runnable'
local bounds = redis.call('MGET', counter, session .. 'clear', session .. 'listed')
local boundary = tonumber(bounds[2] or '0')
local total = tonumber(bounds[1] or bounds[2] or '0')
local holder, now, expires_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]

if #redis.call('ZRANGEBYSCORE', ready, '(' .. int(HELD), int(HELD + now), 'LIMIT', '0', '1') > 0 then
  return { 'general' }
end
local through = ARGV[6] == '' and HELD - 1 or math.min(tonumber(ARGV[6]), HELD - 1)
local page = redis.call('ZRANGEBYSCORE', ready, '1', int(through), 'WITHSCORES', 'LIMIT', '0', ARGV[7])
local n = #page / 2
if n == 0 then
  -- Nothing free: busy until the earliest hold ends, settled with none.
  -- (With `through`, which held heads count depends on their indexes.)
  if ARGV[6] ~= '' or served then return { 'general' } end
  local first = redis.call('ZRANGEBYSCORE', ready, '(' .. int(HELD + now), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if #first == 0 then return { 'settled' } end
  return { 'busy', int(tonumber(first[2]) - HELD) }
end

-- Per head: its consumer, kind, index text and row prefix; per chunk, the
-- heads in it and their attempt fields. The row is '<n>:<consumer>#' for
-- an event head, the cursor id for a lane head, and the lane's row ('L'
-- for 'G') for a log head.
local consumers, kinds, indexes, prefixes, chunks, order = {}, {}, {}, {}, {}, {}
for i = 1, n do
  local cid, idx = page[2 * i - 1], page[2 * i]
  if tonumber(idx) > total then return { 'general' } end
  local colon = string.find(cid, ':', 1, true)
  local size = tonumber(string.sub(cid, 1, colon - 1))
  consumers[i], indexes[i] = string.sub(cid, colon + 1, colon + size), idx
  if served and not served[consumers[i]] then return { 'general' } end
  local sigil, row = string.byte(cid, colon + size + 1), cid
  if sigil == 35 then -- '#'
    row, kinds[i] = string.sub(cid, 1, colon + size + 1), '#'
  elseif sigil == 71 then -- 'G'
    row = string.sub(cid, 1, colon + size) .. 'L' .. string.sub(cid, colon + size + 2)
    kinds[i] = string.sub(cid, colon + size + 1)
  else
    kinds[i] = string.sub(cid, colon + size + 1)
  end
  prefixes[i] = idx .. ':' .. row .. ':'
  local chunk = chunk_group(session, chunks, order, tonumber(idx))
  chunk.members[#chunk.members + 1] = i
  chunk.names[#chunk.names + 1] = prefixes[i] .. 'd'
end
-- A head claimed before (it has an attempt) is the general path's.
for _, chunk in ipairs(order) do
  for _, attempt in ipairs(sliced('HMGET', chunk.key, chunk.names)) do
    if attempt then return { 'general' } end
  end
end

local stamp = ARGV[2]
for _, chunk in ipairs(order) do
  local fields = {}
  for _, i in ipairs(chunk.members) do
    local prefix, w = prefixes[i], #fields
    fields[w + 1], fields[w + 2] = prefix .. 'd', '1'
    fields[w + 3], fields[w + 4] = prefix .. 'l', kinds[i]
    fields[w + 5], fields[w + 6] = prefix .. 'fc', stamp
    fields[w + 7], fields[w + 8] = prefix .. 'lc', stamp
    fields[w + 9], fields[w + 10] = prefix .. 'ch', holder
    fields[w + 11], fields[w + 12] = prefix .. 'ce', expires_at
  end
  fields[#fields + 1] = CHUNK_PIN
  fields[#fields + 1] = CHUNK_PIN_VALUE
  sliced('HSET', chunk.key, fields)
end
local held, scores = int(HELD + tonumber(expires_at)), {}
for i = 1, n do
  scores[2 * i - 1], scores[2 * i] = held, page[2 * i - 1]
end
sliced('ZADD', ready, scores)
local reply = { 'claimed', int(n) }
for i = 1, n do reply[2 + i] = { consumers[i], kinds[i], indexes[i] } end
reply[n + 3] = int(boundary)
reply[n + 4] = int(total)
reply[n + 5] = ready_mark(session, now, true, bounds[3], false, false)
return reply
