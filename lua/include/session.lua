--@include util
-- session: the keys of one session, its bounds, head rows, buffered writes
-- and the runnable set.
--
-- KEYS[1] is always the session's counter (<prefix>:{<tag>}:count). Every
-- other key of the session is derived from it and shares its hash tag, so a
-- script stays in one cluster slot and, on Upstash, locks one session.
-- KEYS[2] is the session's sentinel, a key never written: declared so that
-- Redis refuses the script while the slot migrates (keys.Session.Sentinel).
local COUNTER = KEYS[1]
local SESSION = string.sub(COUNTER, 1, -6)
local LOG, CLEAR, LIVE = SESSION .. 'log', SESSION .. 'clear', SESSION .. 'live'
local READY, CURSORS = SESSION .. 'runnable', SESSION .. 'cursors'
local PINS, TYPED = SESSION .. 'pins', SESSION .. 'typed'

-- Bounds, filled by read_bounds: the session head, the latest clear marker,
-- the number of live (runnable, not dead-lettered) heads, and the typed-type
-- registry { type = { from, last } }: the type's index holds every event of
-- it above `from`, and no event of it lies above `last`.
local total, boundary, live = 0, 0, 0
-- The listed key's value as read_bounds read it (false: none; nil: not
-- read), for ready_mark.
local listed_value = nil
local typed, typed_dirty, live_dirty = {}, false, false

local function id_key(id) return SESSION .. 'id:' .. id end

-- A batch appended without ids gets the ids '<nonce><position>' (24 + 8
-- lower-case hex digits, position from 0) and one record for all of them,
-- ids:<nonce> = '<first index>:<count>'. Any 32-hex-digit id may be such
-- an id: its owner is its own id key's, else its block record's.
local function block_of(id)
  if string.len(id) == 32 and not string.find(id, '[^0-9a-f]') then
    return string.sub(id, 1, 24), tonumber(string.sub(id, 25), 16)
  end
end
local function block_key(nonce) return SESSION .. 'ids:' .. nonce end
-- The index a block record gives position p, or nil.
local function block_owner(record, p)
  local first, n = string.match(record, '^(%d+):(%d+)$')
  if first and p < tonumber(n) then return int(tonumber(first) + p) end
end

-- One MGET for the counter, the clear marker, the typed registry, the live
-- count, and the owners of `ids`. Returns, per id, the index it names in the
-- current lifetime, or false (an id recorded below the clear is free again).
local function read_bounds(ids)
  local keys, blocks = { COUNTER, CLEAR, TYPED, LIVE, SESSION .. 'listed' }, {}
  for i, id in ipairs(ids or {}) do
    keys[#keys + 1] = id_key(id)
    local nonce, p = block_of(id)
    if nonce then blocks[i] = { #keys + 1, p } keys[#keys + 1] = block_key(nonce) end
  end
  local values = sliced('MGET', nil, keys)
  -- A collapsed session keeps only its clear marker.
  total = tonumber(values[1] or values[2] or '0')
  boundary = tonumber(values[2] or '0')
  if values[3] then typed = cjson.decode(values[3]) end
  live = tonumber(values[4] or '0')
  listed_value = values[5] or false
  local owners, at = {}, 6
  for i = 1, #(ids or {}) do
    local owner = values[at]
    local block = blocks[i]
    if not owner and block and values[block[1]] then owner = block_owner(values[block[1]], block[2]) end
    if owner and tonumber(owner) < boundary then owner = false end
    owners[i] = owner or false
    at = at + (block and 2 or 1)
  end
  return owners
end

local function entry_index(id) return tonumber(string.match(id, '^(%d+)')) end

-- Cursor ids: <byte length of consumer>:<consumer><tag>, tag '#<index>',
-- 'L<lane>' or 'G<lane>'.
local function cid_of(consumer, tag)
  return int(string.len(consumer)) .. ':' .. consumer .. tag
end
local function parse_cid(cid)
  local colon = string.find(cid, ':', 1, true)
  local n = tonumber(string.sub(cid, 1, colon - 1))
  return string.sub(cid, colon + 1, colon + n), string.sub(cid, colon + n + 1)
end
-- A head row's name: '#' for event cursors, 'L<lane>' for lane and log
-- cursors alike (requests name a log cursor's head by its lane).
local function row_of(consumer, tag)
  local kind = string.sub(tag, 1, 1)
  if kind == '#' then return cid_of(consumer, '#') end
  if kind == 'G' then return cid_of(consumer, 'L' .. string.sub(tag, 2)) end
  return cid_of(consumer, tag)
end
-- Whether a head row of kind `kind` ('#', 'L<lane>' or 'G<lane>', written
-- when claimed) belongs to the cursor a request names by `tag`.
local function owns(kind, tag)
  if not kind then return false end
  if tag == '#' then return kind == '#' end
  return kind == tag or kind == 'G' .. string.sub(tag, 2)
end
-- The cursor id of a head row of kind `kind` at idx.
local function cid_for(consumer, kind, idx)
  if kind == '#' then return cid_of(consumer, '#' .. int(idx)) end
  return cid_of(consumer, kind)
end

-- A completed head row keeps one column, 'p' = "<processed at>:<attempt>"
-- (attempt 0 for a skipped head), plus its returned ids ('ri', each as
-- '<byte length>:<id>', concatenated) and, for lane and log rows, its kind;
-- an event row's kind is its name.
local function processed(now, attempt) return now .. ':' .. attempt end
local function processed_attempt(p) return tonumber(string.match(p, ':(%d+)$') or '0') end

-- Building a string is what a script pays most for on Redis (a
-- number-to-text conversion or a concatenation costs as much as a small
-- command), so chunk keys and row prefixes are built once per script.
local chunk_keys, is_chunk, row_prefixes = {}, {}, {}
local function chunk_key(idx)
  local chunk = math.floor((idx - 1) / CHUNK)
  local key = chunk_keys[chunk]
  if not key then
    key = SESSION .. 'heads:' .. int(chunk)
    chunk_keys[chunk] = key
    is_chunk[key] = true
  end
  return key
end

-- "<idx>:<row>:", the prefix of a head row's fields.
local function row_prefix(idx, row)
  local rows = row_prefixes[idx]
  if not rows then
    rows = {}
    row_prefixes[idx] = rows
  end
  local prefix = rows[row]
  if not prefix then
    prefix = int(idx) .. ':' .. row .. ':'
    rows[row] = prefix
  end
  return prefix
end
local function row_field(idx, row, column)
  return row_prefix(idx, row) .. column
end

-- Reads `columns` of each { index, row } ref with one HMGET per chunk.
-- Returns one row (a list aligned with `columns`) per ref.
local function read_rows(refs, columns)
  local groups, order = {}, {}
  for position, ref in ipairs(refs) do
    local key = chunk_key(ref[1])
    local group = groups[key]
    if not group then
      group = { positions = {}, names = {} }
      groups[key] = group
      order[#order + 1] = key
    end
    group.positions[#group.positions + 1] = position
    local prefix = row_prefix(ref[1], ref[2])
    local names = group.names
    for c = 1, #columns do names[#names + 1] = prefix .. columns[c] end
  end
  local rows = {}
  for _, key in ipairs(order) do
    local group = groups[key]
    local values = sliced('HMGET', key, group.names)
    for n, position in ipairs(group.positions) do
      local row = {}
      for c = 1, #columns do row[c] = values[(n - 1) * #columns + c] end
      rows[position] = row
    end
  end
  return rows
end

-- One type's index key, named by the type's bytes in hex.
local function type_key(name)
  return SESSION .. 'type:' .. (string.gsub(name, '.', function(c)
    return string.format('%02x', string.byte(c))
  end))
end

-- Buffered writes, sent by commit(): one MSET for strings, one HSET and one
-- HDEL per hash, one ZADD and one ZREM for the runnable set. A buffered
-- write is invisible to reads until committed, so a script never reads what
-- it has buffered.
local strings = {}
local hsets, hset_order, hdels, hdel_order = {}, {}, {}, {}
local ready_changes, ready_order = {}, {}
-- Set by commit() once the runnable set changed, and by ready_set once a
-- head became free to claim (see with_ready).
local ready_touched, added_free = false, false

local function mark(key, value)
  strings[#strings + 1] = key
  strings[#strings + 1] = value
end
local function put(key, field, value)
  local fields = hsets[key]
  if not fields then
    fields = {}
    hsets[key] = fields
    hset_order[#hset_order + 1] = key
  end
  fields[#fields + 1] = field
  fields[#fields + 1] = value
end
local function drop(key, field)
  local fields = hdels[key]
  if not fields then
    fields = {}
    hdels[key] = fields
    hdel_order[#hdel_order + 1] = key
  end
  fields[#fields + 1] = field
end
local function put_row(idx, row, column, value)
  put(chunk_key(idx), row_field(idx, row, column), value)
end
local function drop_row(idx, row, column)
  drop(chunk_key(idx), row_field(idx, row, column))
end

-- Sets a cursor's runnable score: its head index, negated while the head is
-- dead-lettered, or false to remove it. `delta` is how the number of live
-- heads changes (+1 a head becomes runnable, -1 one stops being, 0 neither).
local function ready_set(cid, score, delta)
  if ready_changes[cid] == nil then ready_order[#ready_order + 1] = cid end
  ready_changes[cid] = score
  if score and score > 0 and score < HELD then added_free = true end
  if delta ~= 0 then
    live = live + delta
    live_dirty = true
  end
end

-- Holds a cursor's live head until `until_ms` (a claim's expiry or a
-- retry hold): claims skip it until then.
local function hold(cid, until_ms)
  ready_set(cid, HELD + until_ms, 0)
end

-- Sends a zset's buffered changes: member → score, or false to remove.
local function flush_scores(key, changes, order)
  local adds, removes = {}, {}
  for _, member in ipairs(order) do
    local score = changes[member]
    if score then
      adds[#adds + 1] = score
      adds[#adds + 1] = member
    else
      removes[#removes + 1] = member
    end
  end
  sliced('ZADD', key, adds)
  sliced('ZREM', key, removes)
end

local function commit()
  if live_dirty then mark(LIVE, int(live)) end
  if typed_dirty then mark(TYPED, cjson.encode(typed)) end
  sliced('MSET', nil, strings)
  for _, key in ipairs(hset_order) do
    local fields = hsets[key]
    -- Every write to a chunk sets its pin (see util).
    if is_chunk[key] then
      fields[#fields + 1] = CHUNK_PIN
      fields[#fields + 1] = CHUNK_PIN_VALUE
    end
    sliced('HSET', key, fields)
  end
  for _, key in ipairs(hdel_order) do sliced('HDEL', key, hdels[key]) end
  if #ready_order > 0 then ready_touched = true end
  flush_scores(READY, ready_changes, ready_order)
  strings, hsets, hset_order, hdels, hdel_order = {}, {}, {}, {}, {}
  ready_changes, ready_order, live_dirty, typed_dirty = {}, {}, false, false
end

-- Releases the snapshot pins a head row holds (a JSON list of refs, each
-- naming a history zset and an index): a checkpoint no head pins any more
-- leaves its history.
local function release_pins(idx, row, pins)
  if not pins or pins == '' then return end
  for _, ref in ipairs(cjson.decode(pins)) do
    local count = redis.call('HINCRBY', PINS, ref, -1)
    if count <= 0 then
      redis.call('HDEL', PINS, ref)
      local checkpoint = cjson.decode(ref)
      redis.call('ZREMRANGEBYSCORE', checkpoint[1], checkpoint[2], checkpoint[2])
    end
  end
  put_row(idx, row, 'pins', '')
end

-- The reply of a write, with the ready mark appended once the runnable set
-- changed (util's ready_mark). `bump` for a claim, the one write here that
-- makes free heads un-free; `holds` as ready_mark's. Call after commit().
local function with_ready(reply, now, bump, holds)
  -- The live count is known once read_bounds ran (it read listed too).
  local live_after = listed_value ~= nil and live or nil
  reply[#reply + 1] = ready_touched and
    ready_mark(SESSION, tonumber(now), bump, listed_value, not bump, added_free, holds, live_after) or READY_MARK
  return reply
end
