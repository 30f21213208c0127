--@include cursor
-- complete: finishes a claimed attempt. Fenced by (consumer, cursor, index,
-- attempt, live claim): it moves the cursor past its head (an event cursor is
-- done, a lane cursor takes its lane's next event, a log cursor the next
-- event of its types) and appends the events the handler returned, their
-- cause being that attempt, in one step. A retry after a lost
-- acknowledgement replays the committed events.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  consumer
-- ARGV[3]  tag: '#' for an event cursor, 'L<lane>' for a lane or log cursor
-- ARGV[4]  head index
-- ARGV[5]  attempt
-- ARGV[6]  the returned events' cause, as JSON
-- ARGV[7]  served consumers: '' for all, else JSON (see cursor.use_served)
-- ARGV[8]  the returned event ids, each as '<byte length>:<id>', concatenated
--          (byte-exact, unlike JSON, for ids that are not UTF-8)
-- ARGV[9]  n, the number of returned events
-- then per returned event i (offset o = 9 + (i - 1) * 4):
--   ARGV[o+1] id, ARGV[o+2] type, ARGV[o+3] payload JSON, ARGV[o+4] targets JSON or ''
--
-- Replies:
--   { 'ok', first index of the returned events }
--   { 'duplicate', entry... }   a retry of the committed completion: its events
--   { 'superseded' }            the attempt no longer owns the head
--   { 'missing' }               no event at that index
--   { 'partial' }               returned ids clash with stored ones, or differ
--                               from the committed completion's
--   { 'index', type, after }    index `type` down to `after`, then run again
local now = ARGV[1]
local consumer, tag, idx, attempt = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local at = row_of(consumer, tag)
local n = tonumber(ARGV[9])
local ids = {}
for i = 1, n do ids[i] = ARGV[9 + (i - 1) * 4 + 1] end
local owners = read_bounds(ids)
if idx <= boundary then return { 'superseded' } end
if idx < 1 or idx > total then return { 'missing' } end
local row = read_rows({ { idx, at } }, { COL_ATTEMPTS, COL_PROCESSED, COL_RETURNED, COL_HOLDER, COL_DEAD, COL_KIND, COL_NEXT, COL_PINS })[1]
if row[2] then
  -- The cursor already moved past this head: a retry of the same attempt
  -- with the same ids replays; anything else is superseded or partial.
  -- An event row's kind is its name (its 'l' column goes at completion).
  local kind = row[6] or (tag == '#' and '#')
  if not owns(kind, tag) or processed_attempt(row[2]) ~= attempt then return { 'superseded' } end
  if (row[3] or '') ~= ARGV[8] then return { 'partial' } end
  for i = 1, n do
    if not owners[i] then return { 'partial' } end
  end
  local reply = { 'duplicate' }
  for i = 1, n do
    local id = owners[i] .. '-0'
    reply[#reply + 1] = redis.call('XRANGE', LOG, id, id)[1]
  end
  return reply
end
if tonumber(row[1] or '0') ~= attempt or not row[4] or row[5] or not owns(row[6], tag) then
  return { 'superseded' }
end
for i = 1, n do
  if owners[i] then return { 'partial' } end
end
use_served(ARGV[7])
local batch = {}
for i = 1, n do
  local o = 9 + (i - 1) * 4
  local targets = targets_of(ARGV[o + 4])
  batch[i] = { idx = total + i, type = ARGV[o + 2], targets = targets, not_before = targets[1] and targets[1][3] }
end
local moved, missing = advance(consumer, row[6], idx, row[7], batch, true)
if not moved then return { 'index', missing, int(idx) } end
local planned, unindexed, after = plan(batch, total)
if not planned then return { 'index', unindexed, int(after) } end

-- The head row keeps only its completion record (see processed); the
-- claim columns are spent.
put_row(idx, at, COL_PROCESSED, processed(now, ARGV[5]))
if n > 0 then put_row(idx, at, COL_RETURNED, ARGV[8]) end
for _, column in ipairs({ COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY, COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR, COL_NEXT, COL_PINS }) do
  drop_row(idx, at, column)
end
-- An event row's kind is its name; lane and log rows keep theirs.
if row[6] == '#' then drop_row(idx, at, COL_KIND) end
in_flight(consumer, -1)
release_pins(idx, at, row[8])
for i = 1, n do
  local o = 9 + (i - 1) * 4
  local child = int(total + i)
  if batch[i].not_before then
    redis.call('XADD', LOG, child .. '-0',
      'id', ARGV[o + 1], 'type', ARGV[o + 2], 'payload', ARGV[o + 3],
      'created_at', now, 'cause', ARGV[6], 'not_before', int(batch[i].not_before))
  else
    redis.call('XADD', LOG, child .. '-0',
      'id', ARGV[o + 1], 'type', ARGV[o + 2], 'payload', ARGV[o + 3],
      'created_at', now, 'cause', ARGV[6])
  end
  mark(id_key(ARGV[o + 1]), child)
end
index_batch(batch)
enqueue(batch)
if n > 0 then mark(COUNTER, int(total + n)) end
flush_states()
commit()
return with_ready({ 'ok', int(total + 1) }, now)
