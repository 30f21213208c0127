--@include util
-- complete_fast: complete_many's common case, written flat (no session or
-- cursor includes: a script pays for every table, string and helper it
-- builds). It completes event and lane heads that were claimed and never
-- failed, pinned or completed before, and reports stale attempts
-- superseded; anything else — a log head, a head with failures or pins, a
-- retry of a completion, an index outside the log — gets { 'general' }
-- with nothing written: run complete_many. Whatever it writes,
-- complete_many would write the same.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV     as complete_many's: now, served (unused here), k, then per
--          attempt consumer, tag ('#' or 'L<lane>'), head index, attempt;
--          then, optionally, a holder and a claim expiry (epoch ms): claim
--          the next head of every lane this call moves on for that holder
--          (complete and claim next, so an ordered lane costs one script
--          call per event). A lane's next head was never claimed: it is
--          claimed as claim_fast claims a fresh head.
--
-- Replies: { 'ok', outcome... } (each 'ok' or 'superseded'), followed,
-- when a holder was given and any attempt completed, by a table of
-- { consumer, kind, index } per claimed next head (as claim's fresh
-- heads; empty when no lane moved on; a lone one also carries its stream
-- entry as a fourth element); or { 'general' }.
local counter = KEYS[1]
local session = string.sub(counter, 1, -6)
local bounds = redis.call('MGET', counter, session .. 'clear', session .. 'live', session .. 'listed')
local boundary = tonumber(bounds[2] or '0')
local total = tonumber(bounds[1] or bounds[2] or '0')
local live = tonumber(bounds[3] or '0')
local now, k = ARGV[1], tonumber(ARGV[3])

-- Per attempt: its row ('<n>:<consumer>#' for an event head, the cursor id
-- for a lane head) and row prefix; per chunk, its attempts and the fields
-- to read.
local COLUMNS = { 'd', 'p', 'ch', 'f', 'l', 'pins', 'a', 'lfa', 'next' }
local rows, prefixes, chunks, order, lanes = {}, {}, {}, {}, {}
for j = 1, k do
  local o = 3 + (j - 1) * 4
  local consumer, tag = ARGV[o + 1], ARGV[o + 2]
  local idx = tonumber(ARGV[o + 3])
  if idx < 1 or idx > total then return { 'general' } end
  rows[j] = int(string.len(consumer)) .. ':' .. consumer .. tag
  if tag ~= '#' then
    if lanes[rows[j]] then return { 'general' } end
    lanes[rows[j]] = true
  end
  prefixes[j] = ARGV[o + 3] .. ':' .. rows[j] .. ':'
  local chunk = chunk_group(session, chunks, order, idx)
  chunk.members[#chunk.members + 1] = j
  for _, column in ipairs(COLUMNS) do chunk.names[#chunk.names + 1] = prefixes[j] .. column end
end

-- The fences, as complete_many's: the attempt, a live claim, not dead-
-- lettered, the row's kind the request's.
local outcomes, nexts, done = { 'ok' }, {}, 0
for _, chunk in ipairs(order) do
  local values = sliced('HMGET', chunk.key, chunk.names)
  for n, j in ipairs(chunk.members) do
    local at = (n - 1) * #COLUMNS
    local d, p, ch, f, l = values[at + 1], values[at + 2], values[at + 3], values[at + 4], values[at + 5]
    if p or values[at + 6] or values[at + 7] or values[at + 8] then return { 'general' } end
    if l and string.byte(l, 1) == 71 then return { 'general' } end -- a log head: 'G<lane>'
    local o = 3 + (j - 1) * 4
    if tonumber(ARGV[o + 3]) <= boundary or tonumber(d or '0') ~= tonumber(ARGV[o + 4])
      or not ch or f or l ~= ARGV[o + 2] then
      outcomes[j + 1] = 'superseded'
    else
      outcomes[j + 1] = 'ok'
      nexts[j] = values[at + 9] or false
      done = done + 1
    end
  end
end
if done == 0 then return outcomes end

-- Each head row keeps its completion record (and a lane row its kind); an
-- event cursor ends; a lane cursor moves to its next head, or goes idle.
local removed, moved, records, idle = {}, {}, {}, 0
for _, chunk in ipairs(order) do
  local sets, drops = {}, {}
  for _, j in ipairs(chunk.members) do
    if outcomes[j + 1] == 'ok' then
      local prefix, o = prefixes[j], 3 + (j - 1) * 4
      sets[#sets + 1] = prefix .. 'p'
      sets[#sets + 1] = now .. ':' .. ARGV[o + 4]
      drops[#drops + 1] = prefix .. 'd'
      drops[#drops + 1] = prefix .. 'fc'
      drops[#drops + 1] = prefix .. 'lc'
      drops[#drops + 1] = prefix .. 'ch'
      drops[#drops + 1] = prefix .. 'ce'
      if ARGV[o + 2] == '#' then
        drops[#drops + 1] = prefix .. 'l'
        removed[#removed + 1] = rows[j] .. ARGV[o + 3]
        idle = idle + 1
      else
        local cid, next_head = rows[j], nexts[j]
        records[#records + 1] = cid .. ':h'
        records[#records + 1] = next_head or ''
        records[#records + 1] = cid .. ':p'
        records[#records + 1] = ARGV[o + 3]
        if next_head then
          drops[#drops + 1] = prefix .. 'next'
          moved[#moved + 1] = next_head
          moved[#moved + 1] = cid
        else
          records[#records + 1] = cid .. ':t'
          records[#records + 1] = ''
          removed[#removed + 1] = cid
          idle = idle + 1
        end
      end
    end
  end
  if #sets > 0 then
    sets[#sets + 1] = CHUNK_PIN
    sets[#sets + 1] = CHUNK_PIN_VALUE
    sliced('HSET', chunk.key, sets)
    sliced('HDEL', chunk.key, drops)
  end
end
-- Complete and claim next: the lanes' next heads go to the holder.
local holder = ARGV[4 + 4 * k]
local claimed = false
if holder and holder ~= '' then claimed = {} end
if claimed and #moved > 0 then
  local expires_at = ARGV[5 + 4 * k]
  local held = int(HELD + tonumber(expires_at))
  local groups, group_order = {}, {}
  for i = 1, #moved, 2 do
    local idx, cid = moved[i], moved[i + 1]
    local colon = string.find(cid, ':', 1, true)
    local size = tonumber(string.sub(cid, 1, colon - 1))
    local prefix = idx .. ':' .. cid .. ':'
    local kind = string.sub(cid, colon + size + 1)
    local chunk = chunk_group(session, groups, group_order, tonumber(idx))
    local fields = chunk.names
    fields[#fields + 1] = prefix .. 'd'
    fields[#fields + 1] = '1'
    fields[#fields + 1] = prefix .. 'l'
    fields[#fields + 1] = kind
    fields[#fields + 1] = prefix .. 'fc'
    fields[#fields + 1] = now
    fields[#fields + 1] = prefix .. 'lc'
    fields[#fields + 1] = now
    fields[#fields + 1] = prefix .. 'ch'
    fields[#fields + 1] = holder
    fields[#fields + 1] = prefix .. 'ce'
    fields[#fields + 1] = expires_at
    moved[i] = held
    claimed[#claimed + 1] = { string.sub(cid, colon + 1, colon + size), kind, idx }
  end
  for _, chunk in ipairs(group_order) do
    chunk.names[#chunk.names + 1] = CHUNK_PIN
    chunk.names[#chunk.names + 1] = CHUNK_PIN_VALUE
    sliced('HSET', chunk.key, chunk.names)
  end
  -- One lane moved on (a strictly ordered worker): its next event comes
  -- back with it, which spares the worker a second round trip (an entry
  -- through Lua costs the server more than a native XRANGE, so not for
  -- many lanes at once).
  if #claimed == 1 then
    local id = claimed[1][3] .. '-0'
    local found = redis.call('XRANGE', session .. 'log', id, id)
    if #found == 1 then claimed[1][4] = found[1] end
  end
end
sliced('HSET', session .. 'cursors', records)
sliced('ZADD', session .. 'runnable', moved)
sliced('ZREM', session .. 'runnable', removed)
if idle > 0 then redis.call('SET', session .. 'live', int(live - idle)) end
if claimed then outcomes[#outcomes + 1] = claimed end
local claimed_until = claimed and #claimed > 0 and tonumber(ARGV[5 + 4 * k]) or false
outcomes[#outcomes + 1] = ready_mark(session, tonumber(now), false, bounds[4], true,
  #moved > 0 and not claimed_until, claimed_until, live - idle)
return outcomes
