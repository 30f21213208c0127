--@include session
-- sweep: removes what past lifetimes left once no log entry below the clear
-- marker remains: reducer checkpoints and the pin counts naming them, head
-- rows, type-index entries, and idle lane cursors; log cursors are moved to
-- the marker. A lifetime that ended empty then collapses to its marker: the
-- counter (reads fall back to the clear key), the typed registry, the type
-- indexes, pins, the marker's id key and its head chunk go (snapshots taken
-- at the marker belong to the new lifetime and stay); the
-- log keeps the marker so readers resuming before it still find it.

local function sweep()
  local reducers = SESSION .. 'snap-reducers'
  for _, reducer in ipairs(redis.call('SMEMBERS', reducers)) do
    local head_key = SESSION .. 'snap:' .. reducer
    local head = redis.call('GET', head_key)
    -- Snapshots store their index first: read it by pattern (cjson refuses
    -- states nested deeper than 1000 levels).
    local index = head and tonumber(string.match(head, '^{"index":(%d+),') or '')
    if head and (not index or index < boundary) then
      redis.call('DEL', head_key)
      head = false
    end
    local history = SESSION .. 'snap-history:' .. reducer
    redis.call('ZREMRANGEBYSCORE', history, '-inf', '(' .. int(boundary))
    -- A reducer with nothing left of the new lifetime leaves the registry.
    if not head and redis.call('EXISTS', history) == 0 then
      redis.call('SREM', reducers, reducer)
    end
  end
  local counts = redis.call('HGETALL', PINS)
  local stale = {}
  for i = 1, #counts, 2 do
    if tonumber(cjson.decode(counts[i])[2]) < boundary then stale[#stale + 1] = counts[i] end
  end
  sliced('HDEL', PINS, stale)
  for name in pairs(typed) do
    redis.call('ZREMRANGEBYSCORE', type_key(name), '-inf', '(' .. int(boundary))
  end
  local last = math.floor((boundary - 1) / CHUNK)
  local chunks = {}
  for chunk = 0, last - 1 do chunks[#chunks + 1] = SESSION .. 'heads:' .. int(chunk) end
  sliced('UNLINK', nil, chunks)
  local older = {}
  local boundary_chunk = SESSION .. 'heads:' .. int(last)
  for _, field in ipairs(redis.call('HKEYS', boundary_chunk)) do
    local idx = string.match(field, '^(%d+):')
    if idx and tonumber(idx) < boundary then older[#older + 1] = field end
  end
  sliced('HDEL', boundary_chunk, older)

  local records, order = cursor_records()
  local idle, moved = {}, {}
  for _, cid in ipairs(order) do
    local record = records[cid]
    local _, tag = parse_cid(cid)
    local head = (record.h and record.h ~= '') and tonumber(record.h) or false
    local position = tonumber(record.p or '0')
    if head and head <= boundary then head = false end
    if string.sub(tag, 1, 1) == 'G' then
      if position < boundary then position = boundary end
      moved[#moved + 1] = cid .. ':h'
      moved[#moved + 1] = head and int(head) or ''
      moved[#moved + 1] = cid .. ':p'
      moved[#moved + 1] = int(position)
    elseif not head and position <= boundary then
      for suffix in pairs(record) do idle[#idle + 1] = cid .. ':' .. suffix end
    elseif not head and record.h ~= '' then
      moved[#moved + 1] = cid .. ':h'
      moved[#moved + 1] = ''
    end
  end
  sliced('HDEL', CURSORS, idle)
  sliced('HSET', CURSORS, moved)

  local count = redis.call('GET', COUNTER)
  if not count or tonumber(count) ~= boundary or redis.call('ZCARD', READY) > 0 then
    return
  end
  -- Snapshots taken at the marker belong to the new lifetime and stay.
  local gone = { COUNTER, TYPED, PINS, LIVE, chunk_key(boundary) }
  for name in pairs(typed) do gone[#gone + 1] = type_key(name) end
  local marker = redis.call('XRANGE', LOG, int(boundary) .. '-0', int(boundary) .. '-0')[1]
  if marker then
    local fields = marker[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'id' then gone[#gone + 1] = id_key(fields[i + 1]) end
    end
  end
  sliced('UNLINK', nil, gone)
end
