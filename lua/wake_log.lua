--@include cursor
-- wake_log: brings one log cursor up to date without an append, as an append
-- carrying its types would. A missing cursor starts at the clear marker with
-- backfill (its first head the first stored event it takes), else at the
-- session head with nothing to run; an idle one takes the next stored event
-- of its types; one with a head keeps it. Records the types. Writes nothing
-- when nothing changed; a session with nothing after its clear marker leaves
-- a missing cursor missing.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  consumer
-- ARGV[2]  the log's lane
-- ARGV[3]  types: '*' for every type, else a JSON list
-- ARGV[4]  backfill: '1' or '0'
-- ARGV[5]  now, epoch milliseconds
--
-- Replies:
--   { 'ok', position, head or nil, columns (d fc lc ch ce a lf lfa e f), session head }
--   { 'index', type, after }   index `type` down to `after`, then run again
read_bounds()
local consumer, lane, ty = ARGV[1], ARGV[2], ARGV[3]
local types = types_of(ty)
local cid = cid_of(consumer, 'G' .. lane)
load_states({ cid })
local state = states[cid]
local had_head = state.h
if not state.exists and total == boundary then
  return { 'ok', int(boundary), false, {}, int(total) }
end
if not state.exists then
  state.exists, state.p = true, total
  if ARGV[4] == '1' then
    local head, missing = stored_head(boundary, types)
    if head == nil then return { 'index', missing, int(boundary) } end
    state.p, state.h = boundary, head
  else
    -- Nothing it takes is stored after its start: index from there on.
    for name in pairs(types or {}) do
      if typed[name] == nil then register(name, total) end
    end
  end
  state.dirty = true
elseif not state.h then
  -- A deployment that doesn't serve this consumer may have appended events
  -- it takes since it went idle.
  local head, missing = stored_head(state.p, types)
  if head == nil then return { 'index', missing, int(state.p) } end
  if head then state.h, state.dirty = head, true end
end
if state.ty ~= ty then state.ty, state.dirty = ty, true end
local columns = {}
if had_head then
  columns = read_dispatch({ { state.h, row_of(consumer, 'G' .. lane) } })[1]
elseif state.h then
  ready_set(cid, state.h, 1)
end
flush_states()
commit()
return with_ready({ 'ok', int(state.p), state.h and int(state.h) or false, columns, int(total) }, ARGV[5])
