--@include util
-- append_plain: appends one or more batches that carry no cursor state to
-- one session: no event has a cause or a lane target, and no served
-- consumer declares a log. Events may target event cursors (each target is a
-- new runnable head). The store coalesces concurrent appends to a session
-- into one call; each batch keeps append's semantics on its own (all or
-- nothing, contiguous indexes, idempotent by event id, the clear fence on
-- its origin), in the order given. It is every producer's hot path, so it
-- is written flat, without the shared session and cursor includes: Redis
-- runs a script's whole chunk on every call, and each helper, table and
-- string it builds costs server time. What it shares with them (the id
-- block layout, the served set, the type index key, the pending scan) it
-- pastes from their blocks with --@inline.
--
-- A batch sent with a nonce (24 lower-case hex digits) has no ids of its
-- own: its events get '<nonce><position>', position as 8 hex digits from 0,
-- and the batch one id block, ids:<nonce> = '<first index>:<count>',
-- instead of an id key per event (a batch of one: its id key, as usual).
-- Any 32-hex-digit id is looked up in both places (include/session's
-- block_of).
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[3]  k, the number of batches
-- then per batch: its event count n, its origin index or '', its nonce or
--   '', and '1' if any of its events targets event cursors (else '0'),
--   followed by n events, each: id (only without a nonce), type, payload
--   JSON and, only in a batch with targets, m (the event's event-cursor
--   targets) and m cursor-id prefixes '<byte length of consumer>:<consumer>#'
--
-- Replies: { bits, outcome... }, one outcome per batch, where bits =
-- 2 × followed + has_pending: has_pending is 1 when a served consumer has a
-- live head, followed 1 when a reader follows the session (its `followed`
-- key is set: the store publishes the round's wake-up only then):
--   first index             appended (an integer, not a list)
--   { 'empty' }             n was 0
--   { 'dup', entry... }     every id stored (by an earlier call or an earlier
--                           batch of this one): the stored entries, in order
--   { 'partial', count }    some ids stored; this batch wrote nothing
--   { 'cleared', origin }   origin at or below the clear marker; nothing written
--@inline flat_session
local k = tonumber(ARGV[3])

-- The layout of the call, and one MGET (in slices of SLICE keys) for the
-- counter, the clear marker, the typed registry, the live count, the
-- followed mark, each nonce's id block, each explicit id's key (and block,
-- for an id of the generated shape) and, when a batch has targets, the
-- ready-index record (listed). starts[b] is where batch b's header starts; types[e]
-- is where the e-th event of the call has its type (its id, if sent, is
-- just before); at_key[e] is the MGET position of its id key and
-- at_block[e] of its block; at_block[-b] is that of batch b's nonce block.
local keys = { counter, session .. KEY_CLEAR, session .. KEY_TYPED, session .. KEY_LIVE, session .. KEY_FOLLOWED }
local starts, types, at_key, at_block, at, e = {}, {}, {}, {}, 4, 0
local any_targeted = false
for b = 1, k do
  starts[b] = at
  local n, nonce, targeted = tonumber(ARGV[at]), ARGV[at + 2], ARGV[at + 3] == '1'
  any_targeted = any_targeted or targeted
  at = at + 4
  if nonce ~= '' then
    -- A batch of one is recorded under its event's id key, as any id is
    -- (an id block costs a key all the same, and its value more).
    keys[#keys + 1] = n == 1 and (session .. KEY_ID .. nonce .. '00000000') or (session .. KEY_ID_BLOCK .. nonce)
    at_block[-b] = #keys
  end
  for _ = 1, n do
    e = e + 1
    if nonce == '' then
      local id = ARGV[at]
      keys[#keys + 1] = session .. KEY_ID .. id
      at_key[e] = #keys
      --@inline generated_shape
        keys[#keys + 1] = session .. KEY_ID_BLOCK .. string.sub(id, 1, 24)
        at_block[e] = #keys
      end
      at = at + 1
    end
    types[e] = at
    at = at + (targeted and 3 + tonumber(ARGV[at + 2]) or 2)
  end
end
local at_listed = nil
if any_targeted then
  keys[#keys + 1] = session .. KEY_LISTED
  at_listed = #keys
end
local values = sliced('MGET', nil, keys)
-- A collapsed session keeps only its clear marker; an id recorded below
-- the marker is free again.
local boundary = tonumber(string.match(values[2] or '0', '^%d+'))
local total = tonumber(values[1]) or boundary
local live = tonumber(values[4] or '0')

local log, now = session .. KEY_LOG, ARGV[1]
local typed = values[3] and cjson.decode(values[3]) or nil
if values[3] then
  --@inline registry_check registry=typed
end
-- What earlier batches of this call wrote: id -> index, key -> block record.
local written = (k > 1) and {} or nil
local writes, w, indexed = {}, 0, nil
local heads, pending_fast = nil, false
local served = nil
if ARGV[2] ~= '' then
  local entries = cjson.decode(ARGV[2])
  served = {}
  --@inline served_set served_set=served
end
-- The index that owns the call's e-th (explicit) id in this lifetime, or
-- false.
local function owner_of(e)
  local id = ARGV[types[e] - 1]
  local owner = written and written[id]
  if owner then return owner end
  owner = values[at_key[e]]
  local block = at_block[e]
  if not owner and block then
    local record = (written and written[keys[block]]) or values[block]
    if record then
      local p = tonumber(string.sub(id, 25), 16)
      --@inline block_owner
    end
  end
  if owner and tonumber(owner) < boundary then return false end
  return owner or false
end
local replies = { false }
e = 0
for b = 1, k do
  local start = starts[b]
  local n, origin, nonce = tonumber(ARGV[start]), ARGV[start + 1], ARGV[start + 2]
  local reply
  local found, first_found = 0, nil
  if n > 0 and nonce ~= '' then
    local key = keys[at_block[-b]]
    local record = (written and written[key]) or values[at_block[-b]]
    if record then
      local first, count = string.match(record, '^(%d+):(%d+)$')
      if not first then first, count = record, 1 end
      if tonumber(first) >= boundary then
        found, first_found = math.min(n, tonumber(count)), tonumber(first)
      end
    end
  elseif n > 0 then
    for i = 1, n do
      if owner_of(e + i) then found = found + 1 end
    end
  end
  if n == 0 then
    reply = { 'empty' }
  elseif found == n then
    if first_found then
      reply = redis.call('XRANGE', log, string.format('%d-0', first_found), string.format('%d-0', first_found + n - 1))
      table.insert(reply, 1, 'dup')
    else
      reply = { 'dup' }
      for i = 1, n do
        local entry = owner_of(e + i) .. '-0'
        reply[1 + i] = redis.call('XRANGE', log, entry, entry)[1]
      end
    end
  elseif found > 0 then
    reply = { 'partial', string.format('%d', found) }
  elseif origin ~= '' and tonumber(origin) <= boundary then
    reply = { 'cleared', origin }
  else
    -- The entries; their id keys (or block) and the counter go in one MSET.
    -- Events of a type some log cursor reads also join that type's index.
    -- An appended batch's outcome is just its first index, an integer.
    reply = total + 1
    local targeted = ARGV[start + 3] == '1'
    for i = 1, n do
      local o = types[e + i]
      local entry_id = string.format('%d-0', total + i)
      local id
      if nonce ~= '' then
        id = string.format('%s%08x', nonce, i - 1)
      else
        id = ARGV[o - 1]
        w = w + 2
        writes[w - 1] = keys[at_key[e + i]]
        writes[w] = string.sub(entry_id, 1, -3)
        if written then written[id] = writes[w] end
      end
      local typ = ARGV[o]
      -- An uncaused event's entry has no cause field (readers take a
      -- missing cause as none).
      redis.call('XADD', log, entry_id, 'id', id, 'type', typ,
        'payload', ARGV[o + 1], 'created_at', now)
      -- Each event-cursor target is a new runnable head scoring its index.
      if targeted then
        local idx = string.sub(entry_id, 1, -3)
        for t = 1, tonumber(ARGV[o + 2]) do
          local prefix = ARGV[o + 2 + t]
          heads = heads or {}
          heads[#heads + 1] = total + i
          heads[#heads + 1] = prefix .. idx
          live = live + 1
          if not pending_fast then
            if served == nil then
              pending_fast = true
            else
              local colon = string.find(prefix, ':', 1, true)
              pending_fast = served[string.sub(prefix, colon + 1, -2)] == true
            end
          end
        end
      end
      local entry = typed and typed[typ]
      if entry then
        indexed = indexed or {}
        local list = indexed[typ]
        if not list then
          list = {}
          indexed[typ] = list
        end
        list[#list + 1] = total + i
        list[#list + 1] = string.sub(entry_id, 1, -3)
        entry[2] = total + i
      end
    end
    if nonce ~= '' then
      local record = n == 1 and string.format('%d', total + 1) or string.format('%d:%d', total + 1, n)
      w = w + 2
      writes[w - 1] = keys[at_block[-b]]
      writes[w] = record
      if written then
        written[keys[at_block[-b]]] = record
        if n == 1 then written[nonce .. '00000000'] = record end
      end
    end
    total = total + n
  end
  replies[b + 1] = reply
  e = e + n
end

if w > 0 then
  writes[w + 1] = counter
  writes[w + 2] = string.format('%d', total)
  if heads then
    sliced('ZADD', session .. KEY_RUNNABLE, heads)
    writes[#writes + 1] = session .. KEY_LIVE
    writes[#writes + 1] = string.format('%d', live)
  end
  if indexed then
    for name, list in pairs(indexed) do
      --@inline type_key SESSION=session
      sliced('ZADD', key, list)
    end
    writes[#writes + 1] = session .. KEY_TYPED
    writes[#writes + 1] = cjson.encode(typed)
  end
  sliced('MSET', nil, writes)
end

-- Whether a served consumer has a live head: with every consumer served,
-- the live count; else the bounded scan, newest heads first.
local pending = pending_fast
if not pending and live > 0 then
  if served == nil then
    pending = true
  else
    local ready = session .. KEY_RUNNABLE
    --@inline pending_scan served_set=served READY=ready
  end
end
replies[1] = (values[5] and 2 or 0) + (pending and 1 or 0)
-- Targets made new heads: the ready index may have to learn of them.
if heads then
  replies[#replies + 1] = ready_mark(session, tonumber(ARGV[1]), false, values[at_listed] or false, true, true)
end
return replies
