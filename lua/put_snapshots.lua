--@include snapshot
-- put_snapshots: stores snapshots of one reducer's state in a session. The
-- head snapshot (snap:<reducer>) only moves forward; an older snapshot is kept
-- in the history zset (snap-history:<reducer>, score = index) only while a
-- head pins it. A pin holds only on an unfinished, live head: a claimed head
-- row says so itself (kind 'l' written, neither processed 'p' nor
-- dead-lettered 'f'); an unclaimed head by its cursor's runnable score. Each
-- pin that holds is recorded in the head row's 'pins' list (a JSON list of
-- refs, a ref being the JSON text [history key, "index"]) and counted in the
-- session's pins hash; release_pins (session.lua) gives it back when the head
-- completes or dead-letters. Writes below the latest clear marker are
-- dropped, and a head snapshot from before it counts as absent.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  reducer name
-- ARGV[2]  n, the number of writes, sorted by index, at most one per index
-- then per write, from offset o (o = 3 for the first):
--   ARGV[o]    index
--   ARGV[o+1]  snapshot text: {"index":<index>,"state":<state JSON>}
--   ARGV[o+2]  k, the number of pins
--   then per pin: consumer, tag ('#' event cursor, 'L<lane>' lane or log
--   cursor), head index; the next write starts at o + 3 + 3k
--
-- Replies:
--   { 'ok', stored, pins }  stored: writes kept (as head or history);
--                           pins: pins that took hold
--   { 'invalid' }           the stored head snapshot is not one this layout
--                           writes; nothing written
read_bounds()
local reducer = ARGV[1]
local HEAD, HISTORY = snapshot_keys(reducer)

local head = redis.call('GET', HEAD)
local head_index = nil
local stale_head = false
if head then
  head_index = snapshot_index(head)
  if not head_index then return { 'invalid' } end
  if head_index < boundary then
    head, head_index, stale_head = nil, nil, true
  end
end

-- Parse the writes; keep the pins that may hold (on a head of the current
-- lifetime that exists), reading their rows with one HMGET per chunk.
local writes, pins, refs = {}, {}, {}
local offset = 3
for _ = 1, tonumber(ARGV[2]) do
  local write = { index = tonumber(ARGV[offset]), text = ARGV[offset + 1], pins = {} }
  local count = tonumber(ARGV[offset + 2])
  for p = 1, count do
    local o = offset + 3 + (p - 1) * 3
    local pin = { consumer = ARGV[o], tag = ARGV[o + 1], idx = tonumber(ARGV[o + 2]) }
    if write.index >= boundary and pin.idx > boundary and pin.idx <= total then
      pin.row = row_of(pin.consumer, pin.tag)
      pins[#pins + 1] = pin
      refs[#refs + 1] = { pin.idx, pin.row }
      write.pins[#write.pins + 1] = pin
    end
  end
  offset = offset + 3 + count * 3
  if write.index >= boundary then writes[#writes + 1] = write end
end

-- Whether a cursor's runnable score says it waits on idx (a dead-lettered
-- head's score is negated, so it does not). A held head (scheduled, held
-- for a retry or leased) scores HELD + a time instead of its index: an
-- event cursor's is its one head, a lane or log cursor's the head its
-- record names.
local function waits_on(cid, idx, lane)
  local score = redis.call('ZSCORE', READY, cid)
  if not score then return false end
  score = tonumber(score)
  if score == idx then return true end
  if score < HELD then return false end
  if not lane then return true end
  return tonumber(redis.call('HGET', CURSORS, cid .. CURSOR_HEAD) or '') == idx
end

local rows = read_rows(refs, { COL_PINS, COL_PROCESSED, COL_DEAD, COL_KIND })
local held, held_order = {}, {}
for k, pin in ipairs(pins) do
  local row = rows[k]
  local live
  if row[2] or row[3] then
    live = false
  elseif row[4] then
    live = owns(row[4], pin.tag)
  elseif pin.tag == '#' then
    live = waits_on(cid_of(pin.consumer, '#' .. int(pin.idx)), pin.idx, false)
  else
    local lane = string.sub(pin.tag, 2)
    live = waits_on(cid_of(pin.consumer, 'L' .. lane), pin.idx, true) or
      waits_on(cid_of(pin.consumer, 'G' .. lane), pin.idx, true)
  end
  if live then
    local name = int(pin.idx) .. ':' .. pin.row
    local entry = held[name]
    if not entry then
      local list = {}
      if row[1] and row[1] ~= '' then list = cjson.decode(row[1]) end
      local set = {}
      for _, ref in ipairs(list) do set[ref] = true end
      entry = { idx = pin.idx, row = pin.row, list = list, set = set, dirty = false }
      held[name] = entry
      held_order[#held_order + 1] = name
    end
    pin.held = entry
  end
end

local function ref_of(index) return cjson.encode({ HISTORY, int(index) }) end

-- The pin counts this call asks about, read before its first write (one
-- HMGET): the head's and each write's; counts[ref] follows the HINCRBYs
-- below.
local counts = {}
if #writes > 0 then
  local refs_read = {}
  if head_index then refs_read[1] = ref_of(head_index) end
  for _, write in ipairs(writes) do
    write.ref = ref_of(write.index)
    refs_read[#refs_read + 1] = write.ref
  end
  local read = sliced('HMGET', PINS, refs_read)
  for i, ref in ipairs(refs_read) do counts[ref] = tonumber(read[i] or '0') end
end

local pinned = 0
for _, write in ipairs(writes) do
  for _, pin in ipairs(write.pins) do
    local entry = pin.held
    if entry and not entry.set[write.ref] then
      entry.set[write.ref] = true
      entry.list[#entry.list + 1] = write.ref
      entry.dirty = true
      redis.call('HINCRBY', PINS, write.ref, 1)
      counts[write.ref] = counts[write.ref] + 1
      pinned = pinned + 1
    end
  end
end
for _, name in ipairs(held_order) do
  local entry = held[name]
  if entry.dirty then put_row(entry.idx, entry.row, COL_PINS, cjson.encode(entry.list)) end
end
commit()
if #writes == 0 then return { 'ok', '0', int(pinned) } end

if stale_head then
  redis.call('ZREMRANGEBYSCORE', HISTORY, '-inf', '(' .. int(boundary))
end
-- Reclaim finds a session's reducers through this set instead of a scan.
redis.call('SADD', SESSION .. KEY_SNAP_REDUCERS, reducer)

local function pin_count(ref) return counts[ref] end
local function put_history(index, text)
  redis.call('ZREMRANGEBYSCORE', HISTORY, int(index), int(index))
  redis.call('ZADD', HISTORY, int(index), text)
end

local latest = writes[#writes]
local top = head_index
if not head_index or latest.index > head_index then
  -- The head moves forward: the one it replaces stays only while pinned.
  if head and pin_count(ref_of(head_index)) > 0 then put_history(head_index, head) end
  top = latest.index
end
local stored = 0
for _, write in ipairs(writes) do
  if write.index < top then
    if pin_count(write.ref) > 0 then
      put_history(write.index, write.text)
      stored = stored + 1
    else
      redis.call('ZREMRANGEBYSCORE', HISTORY, int(write.index), int(write.index))
    end
  end
end
if latest.index >= top then
  redis.call('SET', HEAD, latest.text)
  redis.call('ZREMRANGEBYSCORE', HISTORY, int(latest.index), int(latest.index))
  stored = stored + 1
end
return { 'ok', int(stored), int(pinned) }
