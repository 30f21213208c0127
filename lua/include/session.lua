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
local SESSION = string.sub(COUNTER, 1, COUNT_CUT)
local LOG, CLEAR, LIVE = SESSION .. KEY_LOG, SESSION .. KEY_CLEAR, SESSION .. KEY_LIVE
local READY, CURSORS = SESSION .. KEY_RUNNABLE, SESSION .. KEY_CURSORS
local PINS, TYPED = SESSION .. KEY_PINS, SESSION .. KEY_TYPED
local FLIGHT = SESSION .. KEY_FLIGHT
local SKIP = SESSION .. KEY_SKIP

-- Bounds, filled by read_bounds: the session head, the latest clear marker,
-- the number of live (runnable, not dead-lettered) heads, and the typed-type
-- registry { type = { from, last } }: the type's index holds every event of
-- it above `from`, and no event of it lies above `last`.
local total, boundary, live = 0, 0, 0
-- The listed key's value as read_bounds read it (false: none; nil: not
-- read), for ready_mark.
local listed_value = nil
-- The scan marks' text (keys.Session.Skip) as read (false: none; nil: not
-- read), and whether this script changed them (commit or skip_save writes
-- them).
local skip_value, skip_dirty = nil, false
local typed, typed_dirty, live_dirty = {}, false, false

local function id_key(id) return SESSION .. KEY_ID .. id end

-- A batch appended without ids gets the ids '<nonce><position>' (24 + 8
-- lower-case hex digits, position from 0) and one record for all of them,
-- ids:<nonce> = '<first index>:<count>'. Any 32-hex-digit id may be such
-- an id: its owner is its own id key's, else its block record's.
local function block_of(id)
  --@block generated_shape
  if string.len(id) == 32 and not string.find(id, '[^0-9a-f]') then
  --@end
    return string.sub(id, 1, 24), tonumber(string.sub(id, 25), 16)
  end
end
local function block_key(nonce) return SESSION .. KEY_ID_BLOCK .. nonce end
-- The index a block record gives position p, or nil.
local function block_owner(record, p)
  local owner = nil
  --@block block_owner
  -- owner: the index the block record `record` ('<first index>:<count>')
  -- gives position p, if any.
  local first, n = string.match(record, '^(%d+):(%d+)$')
  if first and p < tonumber(n) then owner = tonumber(first) + p end
  --@end
  return owner and int(owner)
end

-- One MGET for the counter, the clear marker, the typed registry, the live
-- count, and the owners of `ids`. Returns, per id, the index it names in the
-- current lifetime, or false (an id recorded below the clear is free again).
local function read_bounds(ids)
  local keys, blocks = { COUNTER, CLEAR, TYPED, LIVE, SESSION .. KEY_LISTED, SKIP }, {}
  for i, id in ipairs(ids or {}) do
    keys[#keys + 1] = id_key(id)
    local nonce, p = block_of(id)
    if nonce then blocks[i] = { #keys + 1, p } keys[#keys + 1] = block_key(nonce) end
  end
  local values = sliced('MGET', nil, keys)
  -- A collapsed session keeps only its clear marker.
  boundary = clear_index(values[2])
  total = tonumber(values[1]) or boundary
  if values[3] then
    local registry = cjson.decode(values[3])
    --@block registry_check
    -- A registry that does not decode to a table fails the script here,
    -- before any write (miniredis's cjson returns nil for bad text).
    if type(registry) ~= 'table' then error('a2redis: the typed registry does not decode') end
    --@end
    typed = registry
  end
  live = tonumber(values[4] or '0')
  listed_value = values[5] or false
  skip_value = values[6] or false
  local owners, at = {}, 7
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

-- The id records naming the first n of `entries` (an XRANGE reply), which
-- the caller removes from the log (reclaim, trim): each entry's id key
-- while it still names that entry (an id reused since keeps its new
-- owner), and the id block of each batch with an event among them whose
-- first index is at most `upto` (a block goes with any event of its batch
-- removed: a trim takes the first ones, a reclaim the rest). One MGET;
-- returns the keys to delete and the entries' stream ids.
local function removed_id_records(entries, n, upto)
  local keys, owners_of, stream_ids, seen = {}, {}, {}, {}
  for i = 1, n do
    local entry = entries[i]
    stream_ids[i] = entry[1]
    local fields = entry[2]
    for f = 1, #fields, 2 do
      if fields[f] == 'id' then
        local id = fields[f + 1]
        keys[#keys + 1] = id_key(id)
        owners_of[#keys] = entry_index(entry[1])
        local nonce = block_of(id)
        if nonce and not seen[nonce] then
          seen[nonce] = true
          keys[#keys + 1] = block_key(nonce)
          owners_of[#keys] = false -- a block: its first index at most upto
        end
        break
      end
    end
  end
  local stale = {}
  for i, value in ipairs(sliced('MGET', nil, keys)) do
    local owner = value and tonumber(string.match(value, '^%d+') or '')
    if owner and (owner == owners_of[i] or (owners_of[i] == false and owner <= upto)) then
      stale[#stale + 1] = keys[i]
    end
  end
  return stale, stream_ids
end

-- Cursor ids: <byte length of consumer>:<consumer><tag>, tag '#<index>',
-- 'L<lane>' or 'G<lane>'.
local function cid_of(consumer, tag)
  --@block cid_of
  local cid = int(string.len(consumer)) .. ':' .. consumer .. tag
  --@end
  return cid
end
local function parse_cid(cid)
  --@block cid_consumer
  -- consumer: the consumer of cursor id cid; its tag starts at byte tag_at.
  local colon = string.find(cid, ':', 1, true)
  local tag_at = colon + 1 + tonumber(string.sub(cid, 1, colon - 1))
  local consumer = string.sub(cid, colon + 1, tag_at - 1)
  --@end
  return consumer, string.sub(cid, tag_at)
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
    key = SESSION .. KEY_HEADS .. int(chunk)
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

-- The dispatch columns of head rows, as claims and listings report them:
-- attempts, first and last claimed, holder, expiry, failures, last failed,
-- its attempt, the error and dead-lettered at (read_rows of `refs`).
local function read_dispatch(refs)
  return read_rows(refs, { COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY, COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR, COL_DEAD })
end

-- A cursor record's head field as an index, or false when it has none or
-- the head lies at or below the clear marker (the record is idle).
local function record_head(h)
  local head = (h and h ~= '') and tonumber(h) or false
  if head and head <= boundary then return false end
  return head
end

-- Reads the clear marker alone (a script that needs no other bound).
local function read_clear()
  boundary = clear_index(redis.call('GET', CLEAR))
end

-- One type's index key, named by the type's bytes in hex.
local function type_key(name)
  --@block type_key
  -- key: the index key of type `name`, its bytes in hex (one format of
  -- SLICE bytes at a time: a C function takes at most ~8,000 values).
  local key = SESSION .. KEY_TYPE
  for at = 1, #name, SLICE do
    local piece = string.sub(name, at, at + SLICE - 1)
    key = key .. string.format(string.rep('%02x', #piece), string.byte(piece, 1, -1))
  end
  --@end
  return key
end

-- Buffered writes, sent by commit(): one MSET for strings, one HSET and one
-- HDEL per hash, one ZADD and one ZREM for the runnable set. A buffered
-- write is invisible to reads until committed, so a script never reads what
-- it has buffered.
local strings = {}
local hsets, hset_order, hdels, hdel_order = {}, {}, {}, {}
local ready_changes, ready_order = {}, {}
-- Snapshot pins to give back, { ref, history key, index } (release_pins).
local pin_releases = {}
-- How each consumer's count of heads in flight changes (in_flight), sent
-- by commit().
local flight_changes, flight_order = {}, {}
-- Set by commit() once the runnable set changed, and by ready_set once a
-- head became free to claim (see with_ready). dead_touched: set by
-- ready_set when a head is dead-lettered, and by a write that acts on a
-- dead-lettered head (redrive), so that with_ready recounts the session's
-- dead letters for the dead index (util's ready_mark); no other write pays
-- for it.
local ready_touched, added_free, dead_touched = false, false, false

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
  if score and score < 0 then dead_touched = true end
  if delta ~= 0 then
    live = live + delta
    live_dirty = true
  end
end

-- Counts `delta` heads of `consumer` into (+) or out of (-) flight: a
-- head row whose holder is set where it had none, or cleared where it had
-- one (keys.Session.Flight). Sent by commit(), one HINCRBY per consumer.
local function in_flight(consumer, delta)
  local was = flight_changes[consumer]
  if was == nil then
    flight_order[#flight_order + 1] = consumer
    was = 0
  end
  flight_changes[consumer] = was + delta
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

-- Writes the scan marks when this script changed them.
local function skip_save()
  if skip_dirty then
    redis.call('SET', SKIP, skip_value)
    skip_dirty = false
  end
end

local function commit()
  -- A head freed below its consumer's scan mark lowers the mark (read
  -- first: every read comes before the first write).
  local frees = nil
  for _, member in ipairs(ready_order) do
    local score = ready_changes[member]
    if score and score > 0 and score < HELD then
      frees = frees or {}
      frees[#frees + 1] = score
      frees[#frees + 1] = member
    end
  end
  if frees then
    if skip_value == nil then skip_value = redis.call('GET', SKIP) end
    local lowered = skip_lowered(skip_value, frees)
    if lowered then skip_value, skip_dirty = lowered, true end
  end
  if live_dirty then mark(LIVE, int(live)) end
  if typed_dirty then mark(TYPED, cjson.encode(typed)) end
  sliced('MSET', nil, strings)
  for _, key in ipairs(hset_order) do
    local fields = hsets[key]
    -- Every write to a chunk of a session past CHUNK_PIN_FROM events
    -- sets its pin (see util).
    if is_chunk[key] and total >= CHUNK_PIN_FROM then
      fields[#fields + 1] = CHUNK_PIN
      fields[#fields + 1] = CHUNK_PIN_VALUE
    end
    sliced('HSET', key, fields)
  end
  for _, key in ipairs(hdel_order) do sliced('HDEL', key, hdels[key]) end
  for _, release in ipairs(pin_releases) do
    if redis.call('HINCRBY', PINS, release[1], -1) <= 0 then
      redis.call('HDEL', PINS, release[1])
      redis.call('ZREMRANGEBYSCORE', release[2], release[3], release[3])
    end
  end
  for _, consumer in ipairs(flight_order) do
    --@block flight_send
    -- Sends consumer's change `delta` (non-zero) of heads in flight; a
    -- count at or below zero is deleted (heads claimed before the count
    -- existed are never counted, so it may undercount, never overcount).
    local delta = flight_changes[consumer]
    if delta ~= 0 and redis.call('HINCRBY', FLIGHT, consumer, delta) <= 0 then
      redis.call('HDEL', FLIGHT, consumer)
    end
    --@end
  end
  if #ready_order > 0 then ready_touched = true end
  flush_scores(READY, ready_changes, ready_order)
  skip_save()
  flight_changes, flight_order = {}, {}
  strings, hsets, hset_order, hdels, hdel_order, pin_releases = {}, {}, {}, {}, {}, {}
  ready_changes, ready_order, live_dirty, typed_dirty = {}, {}, false, false
end

-- Releases the snapshot pins a head row holds (a JSON list of refs, each
-- naming a history zset and an index): a checkpoint no head pins any more
-- leaves its history. The refs are decoded here and released by commit(),
-- like every other write: a row's pins that do not decode fail the script
-- before it wrote anything.
local function release_pins(idx, row, pins)
  if not pins or pins == '' then return end
  for _, ref in ipairs(cjson.decode(pins)) do
    local checkpoint = cjson.decode(ref)
    pin_releases[#pin_releases + 1] = { ref, checkpoint[1], int(checkpoint[2]) }
  end
  put_row(idx, row, COL_PINS, '')
end

-- The reply of a write, with the ready mark appended once the runnable set
-- changed (util's ready_mark). `bump` for a claim, the one write here that
-- makes free heads un-free; `holds` as ready_mark's. Call after commit().
local function with_ready(reply, now, bump, holds)
  -- The live count is known once read_bounds ran (it read listed too).
  local live_after = listed_value ~= nil and live or nil
  reply[#reply + 1] = ready_touched and
    ready_mark(SESSION, tonumber(now), bump, listed_value, not bump, added_free, holds, live_after, dead_touched) or READY_MARK
  return reply
end
