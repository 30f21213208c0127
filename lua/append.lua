--@include batch
-- append: adds a batch of events to a session's log, idempotently by event id,
-- and starts the cursor work the events carry.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  n, the number of events
-- ARGV[3]  served consumers: '' for all, else JSON (see cursor.use_served)
-- ARGV[4]  origin index of scheduled work, or ''
-- then per event i (offset o = 4 + (i - 1) * 5):
--   ARGV[o+1] id, ARGV[o+2] type, ARGV[o+3] payload JSON,
--   ARGV[o+4] cause JSON or '', ARGV[o+5] targets JSON ([[consumer, tag]...]; a scheduled event's
--   [[consumer, tag, not before]...], see cursor.targets_of) or ''
-- then, optionally, ARGV[4 + n * 5 + 1]: a trace context (W3C traceparent)
--   every entry stores as its 'trace' field; absent or '' stores none
--
-- Replies:
--   { 'ok', first index, has_pending }              appended
--   { 'empty', has_pending }                        n was 0
--   { 'dup', has_pending, entry... }                every id present: the stored
--                                                    entries, in request order
--   { 'partial', count }                            some ids present; nothing written
--   { 'cleared', origin }                           origin at or below the clear marker
--   { 'superseded', position }                      the cause of event `position` no
--                                                    longer owns its cursor's head
--   { 'index', type, after }                        index `type` down to `after`, then
--                                                    run again; nothing written
local now, n = ARGV[1], tonumber(ARGV[2])
use_served(ARGV[3])
local refused = screen_batch(n)
if refused then return refused end

-- The attempt fence: an event caused by a consumer's attempt commits only
-- while that attempt still owns its cursor's head, undead.
local refs, fenced = {}, {}
for i = 1, n do
  local raw = event_arg(i, 4)
  if raw ~= '' then
    local cause = cjson.decode(raw)
    local idx = tonumber(cause.index)
    if idx <= boundary then return { 'superseded', int(i) } end
    local tag = type(cause.lane) == 'string' and ('L' .. cause.lane) or '#'
    refs[#refs + 1] = { idx, row_of(cause.consumer, tag) }
    fenced[#fenced + 1] = { position = i, consumer = cause.consumer, attempt = tonumber(cause.attempt), tag = tag }
  end
end
local rows = read_rows(refs, { COL_ATTEMPTS, COL_DEAD, COL_PROCESSED, COL_KIND })
for k, cause in ipairs(fenced) do
  local row = rows[k]
  if tonumber(row[1] or '0') ~= cause.attempt or row[2] or row[3] or not owns(row[4], cause.tag) then
    return { 'superseded', int(cause.position) }
  end
  -- The cause's head is still claimed, so it is still pending.
  if served_has(cause.consumer) then pending_fast = true end
end

local base = total
local batch = batch_of(n, base)
local planned, missing, after = plan(batch, base)
if not planned then return { 'index', missing, int(after) } end
add_batch(now, n, base, batch)
index_batch(batch)
enqueue(batch)
flush_states()
commit()
return with_ready({ 'ok', int(base + 1), has_pending() }, now)
