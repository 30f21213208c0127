--@include util
-- claim_fast: the common claim, written flat (no session or cursor
-- includes: a script pays for every table, string and helper it builds,
-- and building the general claim's helpers alone costs more than a small
-- claim; what it shares with them it pastes from their blocks with
-- --@inline). It excludes nothing; it claims only
-- when no hold has ended (no lapsed claim to take over, no retry hold
-- over) and the lowest free heads were never claimed before; it answers
-- busy or settled when no head is free and no hold has ended (with every
-- consumer served). With served consumers (the declared ones) it claims
-- when the lowest free heads are all theirs, and a consumer with a
-- per-session limit when it has room for all of its heads among them.
-- Anything else — and a request with exclusions, which the store never
-- sends here — gets { 'general' }
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
local served, limits = nil, nil
if ARGV[5] ~= '' then
  local entries = cjson.decode(ARGV[5])
  served = {}
  --@inline served_set served_set=served
  -- Consumers with a per-session limit ([name, k]): their heads are
  -- claimed here only while they have room for every one (see below).
  for _, entry in ipairs(entries) do
    if type(entry[2]) == 'number' and entry[2] > 0 then
      limits = limits or {}
      limits[entry[1]] = entry[2]
    end
  end
end
--@inline flat_session
local ready = session .. KEY_RUNNABLE
local bounds = redis.call('MGET', counter, session .. KEY_CLEAR, session .. KEY_LISTED)
--@inline flat_bounds
--@inline claim_args

if #redis.call('ZRANGEBYSCORE', ready, '(' .. int(HELD), int(HELD + now), 'LIMIT', '0', '1') > 0 then
  return { 'general' }
end
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
  --@inline cid_consumer
  consumers[i], indexes[i] = consumer, idx
  if served and not served[consumer] then return { 'general' } end
  local sigil, row = string.byte(cid, tag_at), cid
  if sigil == 35 then -- '#'
    row, kinds[i] = string.sub(cid, 1, tag_at), '#'
  elseif sigil == 71 then -- 'G'
    row = string.sub(cid, 1, tag_at - 1) .. 'L' .. string.sub(cid, tag_at + 1)
    kinds[i] = string.sub(cid, tag_at)
  else
    kinds[i] = string.sub(cid, tag_at)
  end
  prefixes[i] = idx .. ':' .. row .. ':'
  local chunk = chunk_group(session, chunks, order, tonumber(idx))
  chunk.members[#chunk.members + 1] = i
  chunk.names[#chunk.names + 1] = prefixes[i] .. COL_ATTEMPTS
end
-- A limited consumer's heads here all take room (none was claimed
-- before): with room for fewer, claim decides which.
if limits then
  local want, names = {}, {}
  for i = 1, n do
    local consumer = consumers[i]
    if limits[consumer] then
      if not want[consumer] then names[#names + 1] = consumer end
      want[consumer] = (want[consumer] or 0) + 1
    end
  end
  if #names > 0 then
    local counts = redis.call('HMGET', session .. KEY_FLIGHT, unpack(names))
    for i, name in ipairs(names) do
      if tonumber(counts[i] or '0') + want[name] > limits[name] then return { 'general' } end
    end
  end
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
    local prefix, kind = prefixes[i], kinds[i]
    --@inline fresh_claim
  end
  if total >= CHUNK_PIN_FROM then
    fields[#fields + 1] = CHUNK_PIN
    fields[#fields + 1] = CHUNK_PIN_VALUE
  end
  sliced('HSET', chunk.key, fields)
end
local held, scores = int(HELD + tonumber(expires_at)), {}
for i = 1, n do
  scores[2 * i - 1], scores[2 * i] = held, page[2 * i - 1]
end
sliced('ZADD', ready, scores)
-- Every head claimed is in flight (keys.Session.Flight), per consumer.
--@inline flat_flight
for i = 1, n do in_flight(consumers[i], 1) end
--@inline flat_flight_send
local reply = { 'claimed', int(n) }
for i = 1, n do reply[2 + i] = { consumers[i], kinds[i], indexes[i] } end
reply[n + 3] = int(boundary)
reply[n + 4] = int(total)
reply[n + 5] = ready_mark(session, now, true, bounds[3], false, false)
return reply
