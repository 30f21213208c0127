--@include session
-- cursor: moving lane and log cursors, starting the cursor work an appended
-- batch carries, and the typed-log lookups.
--
-- Lane and log cursor records live in the cursors hash (<cid>:h head,
-- :p position, :t lane tail, :ty log types). They are read once per script
-- (load_states) and written back once (flush_states). A record whose head
-- lies at or below the clear marker is idle; a log cursor counts from the
-- marker.
--
-- A typed log cursor finds its next head in its types' indexes (one bounded
-- ZRANGEBYSCORE per type). When an index does not reach back far enough yet
-- the lookup reports the type, and the script replies
-- { 'index', type, after } before writing anything; the caller runs
-- index_type until the index reaches `after`, then runs the script again.

-- Served consumers: all of them, or a set of names and the log specs of
-- those that declare a log.
local served_all, served_set, served_logs = true, {}, {}
-- Set when this script gave a served consumer a live head (an event queued
-- behind a lane's head, which may be dead-lettered, does not count).
local pending_fast = false

-- A log's types: '*' (or nothing) for every type but the clear marker,
-- else a JSON list.
local function types_of(raw)
  local types = nil
  --@block log_types
  -- types: the set of types a log cursor takes, from its types text raw
  -- (nil for '*' or nothing: every type but the clear marker).
  if raw and raw ~= '*' then
    types = {}
    for _, name in ipairs(cjson.decode(raw)) do types[name] = true end
  end
  --@end
  return types
end
local function takes(types, kind)
  return kind ~= CLEAR_TYPE and (types == nil or types[kind] == true)
end

-- raw: '' for every consumer, else a JSON list whose entries are [name] or
-- [name, lane, types ('*' or a JSON list as text), backfill (1 or 0)].
local function use_served(raw)
  if raw == '' then return end
  served_all = false
  local entries = cjson.decode(raw)
  --@block served_set
  -- served_set: the names of a served list's entries.
  for _, entry in ipairs(entries) do served_set[entry[1]] = true end
  --@end
  for _, entry in ipairs(entries) do
    if type(entry[2]) == 'string' then
      served_logs[#served_logs + 1] = {
        name = entry[1], lane = entry[2], ty = entry[3],
        types = types_of(entry[3]), backfill = entry[4] == 1,
      }
    end
  end
end
local function served_has(name) return served_all or served_set[name] == true end

-- '1' when a served consumer has a live head, else '0'. Every consumer:
-- the live count. Some: newest heads first, since a retired consumer's
-- backlog is older than the work a deployment serves.
local function has_pending()
  if pending_fast then return '1' end
  if served_all then return live > 0 and '1' or '0' end
  if live <= 0 or next(served_set) == nil then return '0' end
  local pending = false
  --@block pending_scan
  -- pending: whether a consumer of served_set has a live head in the
  -- runnable set READY. Newest heads first, PENDING_PAGE at a time; past
  -- PENDING_SCAN heads of other consumers it answers "maybe" (true: a
  -- claim tells; HasPending is a hint), so the scan is bounded whatever
  -- the backlog.
  local offset = 0
  while not pending do
    if offset >= PENDING_SCAN then
      pending = true
      break
    end
    local page = redis.call('ZREVRANGEBYSCORE', READY, '+inf', 1, 'LIMIT', offset, PENDING_PAGE)
    for _, cid in ipairs(page) do
      --@inline cid_consumer
      if served_set[consumer] then pending = true end
    end
    if #page < PENDING_PAGE then break end
    offset = offset + PENDING_PAGE
  end
  --@end
  return pending and '1' or '0'
end

-- An event's targets, [[consumer, tag], ...]; a scheduled event's each
-- carry its not-before time (epoch ms) third: [consumer, tag, not_before].
local function targets_of(raw)
  if raw == '' then return {} end
  return cjson.decode(raw)
end

-- The runnable score of a new head at idx: its index, or, scheduled until
-- not_before, held until then (a head held until t that counts no failure
-- when claimed: its row has no holder).
local function head_score(idx, not_before)
  if not_before then return HELD + not_before end
  return idx
end

-- A lane row's successor (its 'next' column): '<index>' or, scheduled,
-- '<index>:<not before>'. Returns the index and the time (false: none).
local function next_of(raw)
  if not raw then return false, false end
  local colon = string.find(raw, ':', 1, true)
  if not colon then return tonumber(raw), false end
  return tonumber(string.sub(raw, 1, colon - 1)), tonumber(string.sub(raw, colon + 1))
end

-- Starts indexing a type from `from` on: every later event of it.
local function register(name, from)
  typed[name] = { from, from }
  typed_dirty = true
end

-- The first stored event in (after, total] of a type in `types` (nil: any
-- type), or false; nil and the type when that type's index can't answer yet.
local function stored_head(after, types)
  if types == nil then
    if after + 1 <= total then return after + 1 end
    return false
  end
  if after >= total then
    -- Nothing stored after it: a type not indexed yet is indexed from here.
    for name in pairs(types) do
      if typed[name] == nil then register(name, total) end
    end
    return false
  end
  local best, short = false, false
  --@block typed_head
  -- best: the first stored event in (after, total] (after < total) of a
  -- type in `types`, from their indexes in `typed`, or false; short: the
  -- first type met whose index cannot tell yet (never indexed, or not from
  -- after on), which ends the search.
  for name in pairs(types) do
    local entry = typed[name]
    if entry == nil or entry[1] > after then
      short = name
      break
    end
    if entry[2] > after then
      --@inline type_key
      local found = redis.call('ZRANGEBYSCORE', key, '(' .. int(after), int(total), 'LIMIT', 0, 1)
      if #found > 0 then
        local idx = tonumber(found[1])
        if not best or idx < best then best = idx end
      end
    end
  end
  --@end
  if short then return nil, short end
  return best
end

-- The first event after `after` a log cursor takes: stored, else in the batch
-- being appended.
local function next_log_head(after, types, batch)
  local head, missing = stored_head(after, types)
  if head == nil then return nil, missing end
  if head then return head end
  for _, event in ipairs(batch) do
    if event.idx > after and takes(types, event.type) then return event.idx end
  end
  return false
end

-- Adds a batch's events of registered types to their indexes.
local function index_batch(batch)
  local adds, order = {}, {}
  for _, event in ipairs(batch) do
    local entry = typed[event.type]
    if entry then
      local list = adds[event.type]
      if not list then
        list = {}
        adds[event.type] = list
        order[#order + 1] = event.type
      end
      list[#list + 1] = event.idx
      list[#list + 1] = int(event.idx)
      entry[2] = event.idx
      typed_dirty = true
    end
  end
  for _, name in ipairs(order) do sliced('ZADD', type_key(name), adds[name]) end
end

local states, state_order = {}, {}
local function load_states(cids)
  local need, names = {}, {}
  for _, cid in ipairs(cids) do
    local state = states[cid]
    if (state == nil or state.partial) and not need[cid] then
      need[cid] = true
      need[#need + 1] = cid
      names[#names + 1] = cid .. CURSOR_HEAD
      names[#names + 1] = cid .. CURSOR_POSITION
      names[#names + 1] = cid .. CURSOR_TAIL
      names[#names + 1] = cid .. CURSOR_TYPES
    end
  end
  if #need == 0 then return end
  local values = sliced('HMGET', CURSORS, names)
  for n, cid in ipairs(need) do
    local h, p, t, ty = values[n * 4 - 3], values[n * 4 - 2], values[n * 4 - 1], values[n * 4]
    local tail = (t and t ~= '') and tonumber(t) or false
    local state = states[cid]
    if state then
      state.t = tail
      state.partial = nil
    else
      local _, tag = parse_cid(cid)
      state = {
        kind = string.sub(tag, 1, 1), exists = p ~= false,
        h = record_head(h), p = tonumber(p or '0'), t = tail, ty = ty or false,
      }
      if state.kind == 'G' and state.exists and state.p < boundary then state.p = boundary end
      states[cid] = state
      state_order[#state_order + 1] = cid
    end
  end
end

local function flush_states()
  for _, cid in ipairs(state_order) do
    local state = states[cid]
    if state.dirty then
      put(CURSORS, cid .. CURSOR_HEAD, state.h and int(state.h) or '')
      put(CURSORS, cid .. CURSOR_POSITION, int(state.p))
      if state.kind == 'L' then
        if not state.partial then put(CURSORS, cid .. CURSOR_TAIL, state.t and int(state.t) or '') end
      elseif state.ty then
        put(CURSORS, cid .. CURSOR_TYPES, state.ty)
      end
    end
  end
end

-- Moves a cursor past its head `idx`. `kind` is the head row's kind,
-- `row_next` its lane successor, `batch` the events being appended after the
-- stored log, `was_live` whether the head counted as live. Buffers its
-- writes; returns nil and a type when that type's index must reach back to
-- idx first (nothing buffered then).
local function advance(consumer, kind, idx, row_next, batch, was_live)
  local before = was_live and 1 or 0
  if kind == '#' then
    local cid = cid_of(consumer, '#' .. int(idx))
    ready_set(cid, false, -before)
    return true
  end
  local cid = cid_of(consumer, kind)
  local state = states[cid]
  local next_head, not_before = nil, false
  if string.sub(kind, 1, 1) == 'L' then
    next_head, not_before = next_of(row_next)
    if not state then
      -- Only the head moves; the tail is read only when the lane empties.
      state = { kind = 'L', exists = true, p = idx, h = false, t = false, ty = false, partial = true }
      states[cid] = state
      state_order[#state_order + 1] = cid
    end
    if not next_head then
      state.t = false
      state.partial = nil
    end
  else
    local lane, raw = string.sub(kind, 2), nil
    for _, spec in ipairs(served_logs) do
      if spec.name == consumer and spec.lane == lane then raw = spec.ty end
    end
    if not raw then
      load_states({ cid })
      raw = states[cid].ty or '*'
    end
    local head, missing = next_log_head(idx, types_of(raw), batch)
    if head == nil then return nil, missing end
    next_head = head
    state = states[cid]
    if not state then
      state = { kind = 'G', exists = true, p = idx, h = false, t = false, ty = raw }
      states[cid] = state
      state_order[#state_order + 1] = cid
    end
    state.ty = raw
  end
  state.h = next_head
  state.p = idx
  state.exists = true
  state.dirty = true
  ready_set(cid, next_head and head_score(next_head, not_before), (next_head and 1 or 0) - before)
  return true
end

-- Reads what an appended batch's cursor work needs: its lane targets'
-- records, and the next head of each served log consumer whose types the
-- batch carries. Writes nothing; returns nil, a type and an index when that
-- type's index must reach back to the index first.
local log_plan = {}
local function plan(batch, base)
  local need = {}
  for _, event in ipairs(batch) do
    for _, target in ipairs(event.targets) do
      if target[2] ~= '#' then need[#need + 1] = cid_of(target[1], target[2]) end
    end
  end
  for _, spec in ipairs(served_logs) do
    for _, event in ipairs(batch) do
      if takes(spec.types, event.type) then
        local cid = cid_of(spec.name, 'G' .. spec.lane)
        log_plan[#log_plan + 1] = { spec = spec, first = event.idx, cid = cid }
        need[#need + 1] = cid
        break
      end
    end
  end
  load_states(need)
  for _, log in ipairs(log_plan) do
    local state, spec = states[log.cid], log.spec
    if not state.exists then
      if spec.backfill then
        local head, missing = stored_head(boundary, spec.types)
        if head == nil then return nil, missing, boundary end
        log.p, log.h = boundary, head or log.first
      else
        -- Nothing it takes is stored after its start: index from there on.
        for name in pairs(spec.types or {}) do
          if typed[name] == nil then register(name, base) end
        end
        log.p, log.h = base, log.first
      end
    elseif not state.h then
      -- Not necessarily the batch's first: a deployment that doesn't serve
      -- this consumer may have appended events it takes since it went idle.
      local head, missing = stored_head(state.p, spec.types)
      if head == nil then return nil, missing, state.p end
      log.h = head or log.first
    end
  end
  return true
end

-- Starts the cursor work `plan` read: each event's targets and each planned
-- log cursor.
local function enqueue(batch)
  for _, event in ipairs(batch) do
    for _, target in ipairs(event.targets) do
      local consumer, tag, not_before = target[1], target[2], target[3]
      if tag == '#' then
        ready_set(cid_of(consumer, '#' .. int(event.idx)), head_score(event.idx, not_before), 1)
        if served_has(consumer) then pending_fast = true end
      else
        local cid = cid_of(consumer, tag)
        local state = states[cid]
        if state.h and state.t then
          local link = int(event.idx)
          if not_before then link = link .. ':' .. int(not_before) end
          put_row(state.t, row_of(consumer, tag), COL_NEXT, link)
        else
          state.h = event.idx
          if state.p < boundary then state.p = boundary end
          ready_set(cid, head_score(event.idx, not_before), 1)
          if served_has(consumer) then pending_fast = true end
        end
        state.t = event.idx
        state.exists = true
        state.dirty = true
      end
    end
  end
  for _, log in ipairs(log_plan) do
    local state = states[log.cid]
    if not state.exists then
      state.exists, state.p, state.h = true, log.p, log.h
      ready_set(log.cid, log.h, 1)
      if served_has(log.spec.name) then pending_fast = true end
    elseif not state.h then
      state.h = log.h
      ready_set(log.cid, log.h, 1)
      if served_has(log.spec.name) then pending_fast = true end
    end
    state.ty = log.spec.ty
    state.dirty = true
  end
end
