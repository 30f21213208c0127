--@include util
-- append_targeted: append_one for an event with event-cursor targets (no
-- cause, no lane target, no served log consumer): one batch of one event,
-- each target a new runnable head, the live count and the ready index's
-- record kept as append_plain keeps them, in one MGET, the XADD, one ZADD
-- and one MSET (and the record's SET when it changes). A script of its own
-- so that append_one, the untargeted case, carries none of this (the ready
-- helpers alone cost it ~2k instructions per call).
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  the event id (a generated one included)
-- ARGV[3]  type
-- ARGV[4]  payload JSON
-- ARGV[5]  origin index, or ''
-- ARGV[6]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[7]  the first 24 digits of an explicit id of the generated shape
--          (32 lower-case hex digits), whose block is looked up too; else ''
-- ARGV[8…] the event's targets, each a cursor-id prefix
--          '<byte length of consumer>:<consumer>#' (at least one)
--
-- Replies: append_one's, and when the ready index must learn of the new
-- heads, { the integer, ready mark } (util's ready_mark) instead of the
-- integer.
local call = redis.call
--@inline flat_session
--@inline one_event_args
local origin, served, block = ARGV[5], ARGV[6], ARGV[7]
local targets = #ARGV - 7
-- values[6]: the ready-index record (listed); values[7] the id's key;
-- values[8]: the id block's record, when there is a block to look up.
local values
if block == '' then
  values = call('MGET', counter, session .. KEY_CLEAR, session .. KEY_TYPED, session .. KEY_LIVE, session .. KEY_FOLLOWED,
    session .. KEY_LISTED, owner_key)
else
  values = call('MGET', counter, session .. KEY_CLEAR, session .. KEY_TYPED, session .. KEY_LIVE, session .. KEY_FOLLOWED,
    session .. KEY_LISTED, owner_key, session .. KEY_ID_BLOCK .. block)
end
--@inline one_event_bounds
local had_live = values[4] and values[4] ~= '0'
local names = nil
if served ~= '' then
  local entries = cjson.decode(served)
  names = {}
  --@inline served_set served_set=names
end
-- A new head of a served consumer is pending.
for t = 8, #ARGV do
  if bits % 2 == 1 then break end
  if not names then
    bits = bits + 1
  else
    local cid = ARGV[t]
    --@inline cid_consumer
    if names[consumer] then bits = bits + 1 end
  end
end
if bits % 2 == 0 and had_live then
  if not names then
    bits = bits + 1
  else
    local pending, ready = false, session .. KEY_RUNNABLE
    --@inline pending_scan served_set=names READY=ready
    if pending then bits = bits + 1 end
  end
end

-- The index that owns the id in this lifetime, if any: its id key, else
-- the block of its first 24 digits (include/session's block_of).
local owner, record = values[7], values[8]
--@inline one_event_screen
-- And the heads, sized before the first write (ZADD takes them in
-- slices).
local runnable = session .. KEY_RUNNABLE
local heads = nil
if targets > 1 then
  heads = {}
  for t = 8, #ARGV do
    heads[#heads + 1] = index
    heads[#heads + 1] = ARGV[t] .. text
  end
end
--@inline one_event_xadd
-- Each event-cursor target is a new runnable head scoring its index.
if heads then
  sliced('ZADD', runnable, heads)
else
  call('ZADD', runnable, index, ARGV[8] .. text)
end
local live = int((values[4] and tonumber(values[4]) or 0) + targets)
if entry then
  -- A type some log cursor reads: the event joins that type's index.
  --@inline type_key SESSION=session name=typ
  call('ZADD', key, index, text)
  entry[2] = index
  call('MSET', owner_key, text, counter, text, session .. KEY_LIVE, live, session .. KEY_TYPED, cjson.encode(registry))
else
  call('MSET', owner_key, text, counter, text, session .. KEY_LIVE, live)
end
-- New heads: the ready index may have to learn of them.
local update = ready_mark(session, tonumber(ARGV[1]), false, values[6] or false, true, true)
if update == READY_MARK then return index * 4 + bits end
return { index * 4 + bits, update }
