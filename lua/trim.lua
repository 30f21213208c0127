--@include session
-- trim: removes one page of a session's handled past — the oldest log
-- entries of the current lifetime (the clear marker included) that every
-- head, log cursor and reducer snapshot has passed — with the id keys and
-- id blocks naming them, their type-index entries and the head chunks
-- wholly below the new floor; the floor key (keys.Session.Floor) says where
-- the retained log starts. Indexes do not move: the next append takes the
-- next index as before. What may go (`bound`): up to the lowest index any
-- head holds (free, held or dead-lettered) less one, no further than a
-- log cursor's position (the events of its types after it may not have
-- been woken yet), and no further than the newest snapshot of each of the
-- session's reducers (a state is read as a snapshot plus the events after
-- it). Rows of the floor's own chunk stay until the floor passes the
-- chunk.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  through: the highest index to remove
-- ARGV[2]  only events created before this time (epoch ms), or ''
-- ARGV[3]  page: the most entries this call removes
-- ARGV[4]  the log cursors that bound the trim: a JSON list of
--          [cursor id, backfill (1 or 0)]; a backfilling one that has no
--          record yet has passed nothing
-- ARGV[5]  '' to trim; else a dry run from this floor (the one the last
--          dry call replied, or 0): the reply is what a trim would do,
--          and nothing is written
--
-- Reply: { floor, removed, more, bound } — the floor after this call (0:
-- nothing ever trimmed), the entries it removed, 1 when entries up to
-- `through` that may go remain (call again), and how far a trim may go
-- now. Every read comes before the first write.
local FLOOR = SESSION .. KEY_FLOOR
read_bounds()
local floor = tonumber(redis.call('GET', FLOOR) or '0') or 0
local dry = ARGV[5] ~= ''
if dry then floor = math.max(floor, tonumber(ARGV[5])) end
local page = tonumber(ARGV[3])
local through = math.min(tonumber(ARGV[1]), total)

-- How far a trim may go.
local bound = total
local function below(idx)
  if idx - 1 < bound then bound = idx - 1 end
end
local free = redis.call('ZRANGEBYSCORE', READY, 1, '(' .. int(HELD), 'WITHSCORES', 'LIMIT', 0, 1)
if free[2] then below(tonumber(free[2])) end
local dead = redis.call('ZREVRANGEBYSCORE', READY, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
if dead[2] then below(-tonumber(dead[2])) end
local held = redis.call('ZRANGEBYSCORE', READY, '(' .. int(HELD), '+inf', 'LIMIT', 0, TRIM_HELD_SCAN + 1)
if #held > TRIM_HELD_SCAN then
  -- Too many held heads to read in one call: nothing goes now.
  below(floor + 1)
else
  local names = {}
  for _, cid in ipairs(held) do
    local _, tag = parse_cid(cid)
    if string.sub(tag, 1, 1) == '#' then
      below(tonumber(string.sub(tag, 2)))
    else
      names[#names + 1] = cid .. CURSOR_HEAD
    end
  end
  for _, h in ipairs(sliced('HMGET', CURSORS, names)) do
    -- A held cursor without a head field is not one this layout writes:
    -- nothing goes.
    below(tonumber(h or '') or floor + 1)
  end
end
local logs = cjson.decode(ARGV[4])
if #logs > 0 then
  local fields = {}
  for i, entry in ipairs(logs) do fields[i] = entry[1] .. CURSOR_POSITION end
  for i, position in ipairs(sliced('HMGET', CURSORS, fields)) do
    local p = tonumber(position or '')
    if p then
      -- A log cursor counts from the clear marker on (its record is
      -- moved there lazily).
      below(math.max(p, boundary) + 1)
    elseif logs[i][2] == 1 then
      below(boundary)
    end
  end
end
local reducers = SESSION .. KEY_SNAP_REDUCERS
if redis.call('SCARD', reducers) > TRIM_HELD_SCAN then
  below(floor + 1)
else
  local names = {}
  for i, reducer in ipairs(redis.call('SMEMBERS', reducers)) do names[i] = SESSION .. KEY_SNAP .. reducer end
  for _, head in ipairs(sliced('MGET', nil, names)) do
    -- Snapshots store their index first (see sweep).
    local index = head and tonumber(string.match(head, '^{"index":(%d+),') or '')
    if index and index >= boundary then
      below(index + 1)
    else
      -- No snapshot of this lifetime: its state is read from the marker.
      below(boundary)
    end
  end
end

-- Never reported below what is trimmed already.
bound = math.max(bound, floor)
local target = math.min(through, bound)
-- The current lifetime's entries from the marker on; what lies below the
-- marker is reclaim's.
local start = math.max(floor + 1, boundary, 1)
if target < start then return { int(floor), 0, 0, int(bound) } end
local entries = redis.call('XRANGE', LOG, int(start) .. '-0', int(target) .. '-0', 'COUNT', page)
local n, young = #entries, false
local cutoff = tonumber(ARGV[2])
if cutoff then
  for i, entry in ipairs(entries) do
    local fields, created = entry[2], nil
    for f = 1, #fields, 2 do
      if fields[f] == 'created_at' then
        created = tonumber(fields[f + 1])
        break
      end
    end
    if not created or created >= cutoff then
      n, young = i - 1, true
      break
    end
  end
end
if n == 0 then return { int(floor), 0, 0, int(bound) } end
-- The new floor: through the target when this call read the last entry
-- up to it, else the last entry it removes.
local new_floor = entry_index(entries[n][1])
if not young and #entries < page then new_floor = target end
local more = (not young and new_floor < target) and 1 or 0
if dry then return { int(new_floor), int(n), more, int(bound) } end

-- The id records naming the removed entries: a batch's id block goes with
-- the first of its events trimmed (the batch's ids are free from then on;
-- a block kept would name trimmed indexes).
local stale, stream_ids = removed_id_records(entries, n, new_floor)
-- Head chunks wholly at or below the new floor (their rows are every
-- cursor's past: none holds a head there).
local chunks = {}
for c = math.floor((start - 1) / CHUNK), math.floor(new_floor / CHUNK) - 1 do
  chunks[#chunks + 1] = SESSION .. KEY_HEADS .. int(c)
end

-- The type-index entries to remove, counted first (a read: a key of the
-- wrong type fails the script here, before any write).
local type_keys = {}
for name in pairs(typed) do
  local key = type_key(name)
  if redis.call('ZCOUNT', key, '-inf', int(new_floor)) > 0 then type_keys[#type_keys + 1] = key end
end

sliced('DEL', nil, stale)
sliced('UNLINK', nil, chunks)
for _, key in ipairs(type_keys) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(new_floor))
end
local removed = sliced_sum('XDEL', LOG, stream_ids)
redis.call('SET', FLOOR, int(new_floor))
return { int(new_floor), int(removed), more, int(bound) }
