--@include util
-- complete_fast: complete_many's common case, written flat (no session or
-- cursor includes: a script pays for every table, string and helper it
-- builds; what it shares with them it pastes from their blocks with
-- --@inline). It completes event, lane and log heads that were claimed and
-- never failed, pinned or completed before, and reports stale attempts
-- superseded; anything else — a head with failures or pins, a retry of a
-- completion, an index outside the log, a scheduled next lane head, a log
-- cursor whose type index cannot tell its next head yet — gets
-- { 'general' } with nothing written: run complete_many. Whatever it
-- writes, complete_many would write the same.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV     as complete_many's: now, served (read for a log head's types),
--          k, then per attempt consumer, tag ('#' or 'L<lane>'), head
--          index, attempt; then, optionally, a holder and a claim expiry
--          (epoch ms): claim the next head of every lane or log cursor this
--          call moves on for that holder (complete and claim next, so an
--          ordered lane or a log costs one script call per event). A
--          cursor's next head was never claimed: it is claimed as
--          claim_fast claims a fresh head. ('' and '' for no claim.)
-- ARGV[6 + 4k]  optionally, compact_log's bounds as
--          '<entries>:<fields>:<bytes>': rebuild the session to its size
--          when this completion leaves it without live heads (see below)
--
-- Replies: { 'ok', outcome... } (each 'ok' or 'superseded'), followed,
-- when a holder was given and any attempt completed, by a table of
-- { consumer, kind, index } per claimed next head (as claim's fresh
-- heads; empty when no cursor moved on; a lone one also carries its
-- stream entry as a fourth element); or { 'general' }.
--@inline flat_session
local bounds = redis.call('MGET', counter, session .. KEY_CLEAR, session .. KEY_LIVE, session .. KEY_LISTED, session .. KEY_SKIP)
--@inline flat_bounds
local live = tonumber(bounds[3] or '0')
local now, k = ARGV[1], tonumber(ARGV[3])

-- Per attempt: its row ('<n>:<consumer>#' for an event head, the cursor id
-- for a lane head, the lane's row for a log head) and row prefix; per
-- chunk, its attempts and the fields to read.
local COLUMNS = { COL_ATTEMPTS, COL_PROCESSED, COL_HOLDER, COL_DEAD, COL_KIND, COL_PINS, COL_FAILURES, COL_LAST_FAILED_ATTEMPT, COL_NEXT }
local rows, prefixes, chunks, order, lanes = {}, {}, {}, {}, {}
for j = 1, k do
  local o = 3 + (j - 1) * 4
  local consumer, tag = ARGV[o + 1], ARGV[o + 2]
  local idx = tonumber(ARGV[o + 3])
  if idx < 1 or idx > total then return { 'general' } end
  --@inline cid_of
  rows[j] = cid
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
local outcomes, nexts, done, logs = { 'ok' }, {}, 0, false
for _, chunk in ipairs(order) do
  local values = sliced('HMGET', chunk.key, chunk.names)
  for n, j in ipairs(chunk.members) do
    local at = (n - 1) * #COLUMNS
    local d, p, ch, f, l = values[at + 1], values[at + 2], values[at + 3], values[at + 4], values[at + 5]
    if p or values[at + 6] or values[at + 7] or values[at + 8] then return { 'general' } end
    local o = 3 + (j - 1) * 4
    local tag = ARGV[o + 2]
    -- A log head's row kind is 'G<lane>', which the request names 'L<lane>'.
    local log = l and string.byte(l, 1) == 71 and tag ~= '#' and string.sub(l, 2) == string.sub(tag, 2)
    if tonumber(ARGV[o + 3]) <= boundary or tonumber(d or '0') ~= tonumber(ARGV[o + 4])
      or not ch or f or (l ~= tag and not log) then
      outcomes[j + 1] = 'superseded'
    elseif log then
      outcomes[j + 1] = 'ok'
      logs = logs or {}
      logs[j] = true
      done = done + 1
    else
      outcomes[j + 1] = 'ok'
      nexts[j] = values[at + 9] or false
      -- A scheduled next head ('<index>:<not before>'): complete_many.
      if nexts[j] and string.find(nexts[j], ':', 1, true) then return { 'general' } end
      done = done + 1
    end
  end
end
if done == 0 then return outcomes end

-- A log head's cursor (its id '<n>:<consumer>G<lane>') takes the next
-- event of its types, from the served list's spec of it or its record's,
-- found in the types' indexes as complete_many's advance finds it. A type
-- whose index cannot tell yet (complete_many extends it first) or that is
-- not indexed at all hands the call on.
local log_cids, log_types = {}, {}
if logs then
  local registry_text = redis.call('GET', session .. KEY_TYPED)
  local typed = {}
  if registry_text then
    local registry = cjson.decode(registry_text)
    --@inline registry_check
    typed = registry
  end
  local specs = ARGV[2] ~= '' and cjson.decode(ARGV[2])
  for j = 1, k do
    if logs[j] then
      local o = 3 + (j - 1) * 4
      local consumer, lane = ARGV[o + 1], string.sub(ARGV[o + 2], 2)
      local log_tag = 'G' .. lane
      --@inline cid_of tag=log_tag
      local raw = nil
      for _, entry in ipairs(specs or {}) do
        if entry[1] == consumer and entry[2] == lane then raw = entry[3] end
      end
      raw = raw or redis.call('HGET', session .. KEY_CURSORS, cid .. CURSOR_TYPES) or '*'
      local types = nil
      --@inline log_types
      local after, head = tonumber(ARGV[o + 3]), false
      if types == nil then
        if after < total then head = after + 1 end
      elseif after >= total then
        for name in pairs(types) do
          if typed[name] == nil then return { 'general' } end
        end
      else
        local best, short = false, false
        --@inline typed_head SESSION=session
        if short then return { 'general' } end
        head = best
      end
      nexts[j] = head and int(head)
      log_cids[j], log_types[j] = cid, raw
    end
  end
end

-- Complete and claim next (a holder given): a lone next head's entry is
-- read now, before the writes.
local holder = ARGV[4 + 4 * k]
local lone = false
if holder and holder ~= '' then
  local count = 0
  for j = 1, k do
    if outcomes[j + 1] == 'ok' and nexts[j] then
      count = count + 1
      lone = nexts[j]
    end
  end
  if count ~= 1 then lone = false end
end
local log_key = session .. KEY_LOG
--@inline lone_entry LOG=log_key

-- Each head row keeps its completion record (and a lane or log row its
-- kind); an event cursor ends; a lane or log cursor moves to its next head,
-- or goes idle.
local removed, moved, moved_rows, records, idle = {}, {}, {}, {}, 0
for _, chunk in ipairs(order) do
  local sets, drops = {}, {}
  for _, j in ipairs(chunk.members) do
    if outcomes[j + 1] == 'ok' then
      local prefix, o = prefixes[j], 3 + (j - 1) * 4
      sets[#sets + 1] = prefix .. COL_PROCESSED
      sets[#sets + 1] = now .. ':' .. ARGV[o + 4]
      drops[#drops + 1] = prefix .. COL_ATTEMPTS
      drops[#drops + 1] = prefix .. COL_FIRST_CLAIMED
      drops[#drops + 1] = prefix .. COL_LAST_CLAIMED
      drops[#drops + 1] = prefix .. COL_HOLDER
      drops[#drops + 1] = prefix .. COL_EXPIRY
      if ARGV[o + 2] == '#' then
        drops[#drops + 1] = prefix .. COL_KIND
        removed[#removed + 1] = rows[j] .. ARGV[o + 3]
        idle = idle + 1
      else
        local cid, next_head = log_cids[j] or rows[j], nexts[j]
        records[#records + 1] = cid .. CURSOR_HEAD
        records[#records + 1] = next_head or ''
        records[#records + 1] = cid .. CURSOR_POSITION
        records[#records + 1] = ARGV[o + 3]
        if log_cids[j] then
          records[#records + 1] = cid .. CURSOR_TYPES
          records[#records + 1] = log_types[j]
        end
        if next_head then
          if not log_cids[j] then drops[#drops + 1] = prefix .. COL_NEXT end
          moved[#moved + 1] = next_head
          moved[#moved + 1] = cid
          moved_rows[#moved / 2] = rows[j]
        else
          if not log_cids[j] then
            records[#records + 1] = cid .. CURSOR_TAIL
            records[#records + 1] = ''
          end
          removed[#removed + 1] = cid
          idle = idle + 1
        end
      end
    end
  end
  if #sets > 0 then
    if total >= CHUNK_PIN_FROM then
      sets[#sets + 1] = CHUNK_PIN
      sets[#sets + 1] = CHUNK_PIN_VALUE
    end
    sliced('HSET', chunk.key, sets)
    sliced('HDEL', chunk.key, drops)
  end
end
-- Complete and claim next: the cursors' next heads go to the holder (a
-- log head's row is its lane's, 'L' for the cursor's 'G').
local claimed = false
if holder and holder ~= '' then claimed = {} end
if claimed and #moved > 0 then
  local expires_at = ARGV[5 + 4 * k]
  local held = int(HELD + tonumber(expires_at))
  local groups, group_order = {}, {}
  for i = 1, #moved, 2 do
    local idx, cid = moved[i], moved[i + 1]
    --@inline cid_consumer
    local prefix = idx .. ':' .. moved_rows[(i + 1) / 2] .. ':'
    local kind = string.sub(cid, tag_at)
    local chunk = chunk_group(session, groups, group_order, tonumber(idx))
    local fields = chunk.names
    --@inline fresh_claim stamp=now
    moved[i] = held
    claimed[#claimed + 1] = { consumer, kind, idx }
  end
  for _, chunk in ipairs(group_order) do
    if total >= CHUNK_PIN_FROM then
      chunk.names[#chunk.names + 1] = CHUNK_PIN
      chunk.names[#chunk.names + 1] = CHUNK_PIN_VALUE
    end
    sliced('HSET', chunk.key, chunk.names)
  end
  if #claimed == 1 and entry then claimed[1][4] = entry end
end
sliced('HSET', session .. KEY_CURSORS, records)
sliced('ZADD', session .. KEY_RUNNABLE, moved)
-- A cursor moved on to a free head below its consumer's scan mark lowers
-- the mark (keys.Session.Skip; heads claimed on are held, not free).
local skip_text = skip_lowered(bounds[5], moved)
if skip_text then redis.call('SET', session .. KEY_SKIP, skip_text) end
sliced('ZREM', session .. KEY_RUNNABLE, removed)
-- A live count of 0 is no key (it reads as 0, as after a clear).
if idle > 0 and live - idle > 0 then
  redis.call('SET', session .. KEY_LIVE, int(live - idle))
elseif idle > 0 then
  redis.call('DEL', session .. KEY_LIVE)
end
-- Heads in flight per consumer (keys.Session.Flight): each completion
-- ends one, each next head claimed starts one.
--@inline flat_flight
for j = 1, k do
  if outcomes[j + 1] == 'ok' then in_flight(ARGV[3 + (j - 1) * 4 + 1], -1) end
end
if claimed then
  for _, head in ipairs(claimed) do in_flight(head[1], 1) end
end
--@inline flat_flight_send
if claimed then outcomes[#outcomes + 1] = claimed end
local claimed_until = claimed and #claimed > 0 and tonumber(ARGV[5 + 4 * k]) or false
outcomes[#outcomes + 1] = ready_mark(session, tonumber(now), false, bounds[4], true,
  #moved > 0 and not claimed_until, claimed_until, live - idle)
-- A completion that leaves the session without live heads rebuilds it to
-- its size here (what compact_log does after other writes), when the
-- store asks (ARGV[6 + 4k]: '<entries>:<fields>:<bytes>', its bounds; ''
-- or absent: never, as on a key-locking server, which refuses DUMP).
-- After the writes above, so every read here is a pcall: a key of another
-- type is left as it is.
local spec = ARGV[6 + 4 * k]
if spec and spec ~= '' and live - idle <= 0 then
  local e, f, b = string.match(spec, '^(%d+):(%d+):(%d+)$')
  if e then
    local log, head = session .. KEY_LOG, total
    local max_entries, max_fields, max_bytes = tonumber(e), tonumber(f), tonumber(b)
    local compact_read = redis.pcall
    local compacted = 0
    --@inline compact
  end
end
return outcomes
