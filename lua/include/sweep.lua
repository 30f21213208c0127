--@include session
-- sweep: removes what past lifetimes left once no log entry below the clear
-- marker remains: reducer checkpoints and the pin counts naming them,
-- type-index entries, head rows, and idle lane cursor records; log cursors
-- are moved to the marker. A lifetime that ended empty then collapses to
-- its marker: the counter (reads fall back to the clear key), the typed
-- registry, the type indexes, pins, the marker's id key and its head chunk
-- go (snapshots taken at the marker belong to the new lifetime and stay),
-- and the marker moves from the log to the clear key (collapsed_marker), so
-- an ended session is one small key; readers resuming before it still find
-- it.
--
-- A call does a bounded amount of it (about SWEEP_BUDGET entries, fields or
-- keys; a session of a million heads sweeps over many calls). The sweep key
-- says a sweep is due or under way, as '<marker>:<phase>:<cursor>': reclaim
-- sets it when it deletes log entries, each call goes on from there, and
-- the call that finishes deletes it; a key naming an older marker (a newer
-- clear came) is started over. The phases: 'r' reducer checkpoints (cursor:
-- an SSCAN cursor), 'd' the reducers left empty, out of the registry (the
-- drop set, SESSION..'sweep-drop', holds them meanwhile), 'p' the pin counts
-- naming old checkpoints (an HSCAN cursor), 't' type-index entries, 'c' the head chunks below the marker's chunk
-- (cursor: the next chunk), 'b' the rows below the marker in its chunk and
-- 'k' the cursor records (cursor: an HSCAN cursor), 'z' the collapse.

local SWEEP = SESSION .. KEY_SWEEP
local REDUCERS, DROP = SESSION .. KEY_SNAP_REDUCERS, SESSION .. KEY_SWEEP_DROP
local sweep_key_found = false

-- The phase and cursor of the sweep due for the current marker, or nil.
local function sweep_state()
  local state = redis.call('GET', SWEEP)
  if not state then return nil end
  sweep_key_found = true
  local at, phase, cursor = string.match(state, '^(%d+):(%a):(%d+)$')
  if at and tonumber(at) == boundary then return phase, cursor end
  return nil
end

-- Records that a sweep of the current marker is due, from the start.
local function sweep_due()
  redis.call('SET', SWEEP, int(boundary) .. ':r:0')
  sweep_key_found = true
end

-- Whether reducer has nothing left: no checkpoint and no history.
local function reducer_empty(reducer)
  return redis.call('EXISTS', SESSION .. KEY_SNAP .. reducer, SESSION .. KEY_SNAP_HISTORY .. reducer) == 0
end

-- One SSCAN step (about `budget` reducers) of the reducer registry from
-- `cursor`: checkpoints of past lifetimes go, and a reducer with nothing
-- left joins the drop set (removing members while scanning would make a
-- server whose cursor is an offset, miniredis, skip some). Returns the
-- reducers read and the next cursor ('0': done).
local function sweep_reducers(cursor, budget)
  local step = redis.call('SSCAN', REDUCERS, cursor, 'COUNT', int(budget))
  local empty = {}
  for _, reducer in ipairs(step[2]) do
    local head_key = SESSION .. KEY_SNAP .. reducer
    local head = redis.call('GET', head_key)
    -- Snapshots store their index first: read it by pattern (cjson refuses
    -- states nested deeper than 1000 levels).
    local index = head and tonumber(string.match(head, '^{"index":(%d+),') or '')
    if head and (not index or index < boundary) then
      redis.call('DEL', head_key)
    end
    redis.call('ZREMRANGEBYSCORE', SESSION .. KEY_SNAP_HISTORY .. reducer, '-inf', '(' .. int(boundary))
    if reducer_empty(reducer) then empty[#empty + 1] = reducer end
  end
  sliced('SADD', DROP, empty)
  return #step[2], step[1]
end

-- Takes up to `budget` reducers out of the drop set and out of the
-- registry, unless a snapshot came for one since it was scanned. Returns
-- how many, and whether the drop set is empty.
local function sweep_drop(budget)
  local taken = redis.call('SPOP', DROP, int(budget))
  local gone = {}
  for _, reducer in ipairs(taken) do
    if reducer_empty(reducer) then gone[#gone + 1] = reducer end
  end
  sliced('SREM', REDUCERS, gone)
  return #taken, #taken < budget
end

-- One HSCAN step (about `budget` fields) of the pin counts from `cursor`,
-- deleting those naming checkpoints of past lifetimes. Returns the fields
-- read and the next cursor ('0': done).
local function sweep_pins(cursor, budget)
  local step = redis.call('HSCAN', PINS, cursor, 'COUNT', int(budget))
  local stale = {}
  for i = 1, #step[2], 2 do
    if tonumber(cjson.decode(step[2][i])[2]) < boundary then stale[#stale + 1] = step[2][i] end
  end
  sliced('HDEL', PINS, stale)
  return #step[2] / 2, step[1]
end

-- Removes up to `budget` type-index entries below the marker; returns how
-- many, and whether none is left.
local function sweep_types(budget)
  local used = 0
  for name in pairs(typed) do
    local key = type_key(name)
    local old = redis.call('ZCOUNT', key, '-inf', '(' .. int(boundary))
    if old > 0 then
      if used >= budget then return used, false end
      local n = math.min(old, budget - used)
      -- Scores are indexes: the entries below the marker rank lowest.
      redis.call('ZREMRANGEBYRANK', key, 0, int(n - 1))
      used = used + n
      if n < old then return used, false end
    end
  end
  return used, true
end

-- Unlinks up to `budget` head chunks below the marker's, from chunk
-- `from` on; returns how many it named and the next chunk (false: none
-- left).
local function sweep_chunks(from, budget)
  local last = math.floor((boundary - 1) / CHUNK)
  local chunks = {}
  for chunk = from, math.min(last - 1, from + budget - 1) do
    chunks[#chunks + 1] = SESSION .. KEY_HEADS .. int(chunk)
  end
  sliced('UNLINK', nil, chunks)
  local next_chunk = from + #chunks
  return #chunks, next_chunk < last and next_chunk
end

-- One HSCAN step (about `budget` fields) of the marker's chunk from
-- `cursor`, deleting the rows below the marker; returns the fields read
-- and the next cursor ('0': done).
local function sweep_boundary_chunk(cursor, budget)
  local key = chunk_key(boundary)
  local step = redis.call('HSCAN', key, cursor, 'COUNT', int(budget))
  local older = {}
  for i = 1, #step[2], 2 do
    local idx = string.match(step[2][i], '^(%d+):')
    if idx and tonumber(idx) < boundary then older[#older + 1] = step[2][i] end
  end
  sliced('HDEL', key, older)
  return #step[2] / 2, step[1]
end

-- One HSCAN step (about `budget` fields) of the cursor records from
-- `cursor`: an idle lane record of a past lifetime goes, a log record
-- moves to the marker, a lane record whose head is gone forgets it.
-- Returns the fields read and the next cursor ('0': done).
local function sweep_cursor_records(cursor, budget)
  local step = redis.call('HSCAN', CURSORS, cursor, 'COUNT', int(budget))
  local cids, seen = {}, {}
  for i = 1, #step[2], 2 do
    local field = step[2][i]
    local at = string.find(field, ':[^:]*$')
    local cid = string.sub(field, 1, at - 1)
    if not seen[cid] then
      seen[cid] = true
      cids[#cids + 1] = cid
    end
  end
  local SUFFIXES = { CURSOR_HEAD, CURSOR_POSITION, CURSOR_TAIL, CURSOR_TYPES }
  local names = {}
  for _, cid in ipairs(cids) do
    for _, suffix in ipairs(SUFFIXES) do names[#names + 1] = cid .. suffix end
  end
  local values = sliced('HMGET', CURSORS, names)
  local idle, moved = {}, {}
  for n, cid in ipairs(cids) do
    local at = (n - 1) * #SUFFIXES
    local h, p = values[at + 1], values[at + 2]
    -- A record another step already removed has nothing left.
    if h or p or values[at + 3] or values[at + 4] then
      local _, tag = parse_cid(cid)
      local head = record_head(h)
      local position = tonumber(p or '0')
      if string.sub(tag, 1, 1) == 'G' then
        if position < boundary then position = boundary end
        moved[#moved + 1] = cid .. CURSOR_HEAD
        moved[#moved + 1] = head and int(head) or ''
        moved[#moved + 1] = cid .. CURSOR_POSITION
        moved[#moved + 1] = int(position)
      elseif not head and position <= boundary then
        for s, suffix in ipairs(SUFFIXES) do
          if values[at + s] then idle[#idle + 1] = cid .. suffix end
        end
      elseif not head and h ~= '' then
        moved[#moved + 1] = cid .. CURSOR_HEAD
        moved[#moved + 1] = ''
      end
    end
  end
  sliced('HDEL', CURSORS, idle)
  sliced('HSET', CURSORS, moved)
  return #step[2] / 2, step[1]
end

-- An ended lifetime keeps its marker in the clear key alone, not in a log:
-- a stream costs ~0.7 KB even rebuilt to its size (Redis keeps a 4 KB
-- listpack for a stream's newest node until the node fills, ~4.7 KB for a
-- one-entry stream). The marker's fields are all fixed but its index, id
-- and creation time (clear.lua), so the clear key says them (util's
-- clear_index reads its index; keys.ParseClear all of it), the log goes,
-- and a read across the marker makes its entry from the key (redisstore's
-- collapsedMarker). The key is kept short enough for Redis to store it in
-- one allocation (44 bytes): '<index>:<created at, base 36>:<id>' with an
-- id of 32 lower-case hex digits (the store's own) packed into its 16
-- bytes, any other id as it is after a ';' instead. It returns the key's
-- value, or nil when the log holds anything but the marker (left as it is);
-- collapse reads it before its first write and writes it after.
local function base36(n)
  local digits, out = '0123456789abcdefghijklmnopqrstuvwxyz', ''
  repeat
    local d = n % 36
    out = string.sub(digits, d + 1, d + 1) .. out
    n = math.floor(n / 36)
  until n == 0
  return out
end
local function collapsed_marker(marker)
  if not marker or redis.call('XLEN', LOG) ~= 1 then return nil end
  local fields, at, id = marker[2], nil, nil
  for i = 1, #fields, 2 do
    if fields[i] == 'created_at' then at = tonumber(fields[i + 1]) end
    if fields[i] == 'id' then id = fields[i + 1] end
  end
  if not at or not id then return nil end
  local sep = ';'
  if #id == 32 and not string.find(id, '[^0-9a-f]') then
    sep, id = ':', (string.gsub(id, '..', function(h) return string.char(tonumber(h, 16)) end))
  end
  return int(boundary) .. ':' .. base36(at) .. sep .. id
end

-- The version of the ready record a collapse removed (see collapse), or
-- nil: the store then tells the session's shard to forget it.
local collapsed_version = nil

-- An empty lifetime collapses to its marker (see above). Its ready record
-- (listed) goes too: a collapsed session has no work, and its next record
-- counts its version from the time (util's fresh_version).
local function collapse()
  local count = redis.call('GET', COUNTER)
  if not count or tonumber(count) ~= boundary or redis.call('ZCARD', READY) > 0 then
    return
  end
  -- MGET: a listed key of another type reads as none, failing nothing.
  local listed = redis.call('MGET', SESSION .. KEY_LISTED)[1]
  collapsed_version = listed and string.match(listed, '^(%d+):') or '0'
  -- Snapshots taken at the marker belong to the new lifetime and stay.
  local gone = { COUNTER, TYPED, PINS, LIVE, FLIGHT, SKIP, SESSION .. KEY_FLOOR, chunk_key(boundary), SESSION .. KEY_LISTED }
  for name in pairs(typed) do gone[#gone + 1] = type_key(name) end
  local marker = redis.call('XRANGE', LOG, int(boundary) .. '-0', int(boundary) .. '-0')[1]
  if marker then
    local fields = marker[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'id' then gone[#gone + 1] = id_key(fields[i + 1]) end
    end
  end
  local value = collapsed_marker(marker)
  sliced('UNLINK', nil, gone)
  if value then
    redis.call('SET', CLEAR, value)
    redis.call('DEL', LOG)
  end
end

-- Sweeps on from `phase` and `cursor` (see sweep_state) for at most about
-- SWEEP_BUDGET items; returns true once done.
local function sweep_run(phase, cursor)
  local used, n = 0, 0
  while phase ~= 'z' do
    if used >= SWEEP_BUDGET then
      redis.call('SET', SWEEP, int(boundary) .. ':' .. phase .. ':' .. cursor)
      return false
    end
    local budget = SWEEP_BUDGET - used
    if phase == 'r' then
      n, cursor = sweep_reducers(cursor, budget)
      if cursor == '0' then phase = 'd' end
    elseif phase == 'd' then
      local done
      n, done = sweep_drop(budget)
      if done then phase = 'p' end
    elseif phase == 'p' then
      n, cursor = sweep_pins(cursor, budget)
      if cursor == '0' then phase = 't' end
    elseif phase == 't' then
      local done
      n, done = sweep_types(budget)
      if done then phase = 'c' end
    elseif phase == 'c' then
      local next_chunk
      n, next_chunk = sweep_chunks(tonumber(cursor), budget)
      if next_chunk then cursor = int(next_chunk) else phase, cursor = 'b', '0' end
    elseif phase == 'b' then
      n, cursor = sweep_boundary_chunk(cursor, budget)
      if cursor == '0' then phase = 'k' end
    else
      n, cursor = sweep_cursor_records(cursor, budget)
      if cursor == '0' then phase = 'z' end
    end
    used, n = used + math.max(n, 1), 0
  end
  collapse()
  if sweep_key_found then redis.call('DEL', SWEEP) end
  return true
end
