--@include session
-- clear: ends a session's lifetime by appending a clear marker event. Every
-- event at or below the marker belongs to a past lifetime: no head survives
-- (the runnable set and the live count go), lane and log cursors are reset
-- lazily against the marker, reads start at it, and its ids are free again.
-- The old entries stay in the log until reclaim deletes them.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  if-last index ('' for none): clear only when the head is this index
-- ARGV[3]  cause consumer, or '' for a clear without a cause
-- ARGV[4]  cause tag ('#' or 'L<lane>')
-- ARGV[5]  cause index
-- ARGV[6]  cause attempt
-- ARGV[7]  the marker's event id
--
-- Replies:
--   { 'ok', cleared ('1' or '0'), head, clear index, appended ('1' or '0') }
--   { 'superseded' }   the cause's attempt no longer owns its head
--   { 'foreign' }      the marker id already names an event of this lifetime
local marker_owner = read_bounds({ ARGV[7] })[1]
local head = total
if ARGV[3] ~= '' then
  local idx = tonumber(ARGV[5])
  if idx <= boundary then return { 'superseded' } end
  local row = read_rows({ { idx, row_of(ARGV[3], ARGV[4]) } }, { COL_ATTEMPTS, COL_DEAD, COL_PROCESSED, COL_KIND })[1]
  if tonumber(row[1] or '0') ~= tonumber(ARGV[6]) or row[2] or row[3] or not owns(row[4], ARGV[4]) then
    return { 'superseded' }
  end
end
if ARGV[2] ~= '' then
  local expected = tonumber(ARGV[2])
  -- A retry of this very clear: its marker sits right after the expected head.
  if boundary > 0 and boundary == expected + 1 then
    return { 'ok', '1', int(head), int(boundary), '0' }
  end
  if head ~= expected then return { 'ok', '0', int(head), int(boundary), '0' } end
end
if head == 0 or boundary == head then
  return { 'ok', '1', int(head), int(boundary), '0' }
end
if marker_owner then return { 'foreign' } end
local idx = int(head + 1)
redis.call('XADD', LOG, idx .. '-0',
  'id', ARGV[7], 'type', CLEAR_TYPE, 'payload', 'null',
  'created_at', ARGV[1], 'cause', '')
-- Nothing of the old lifetime is runnable or in flight any more.
redis.call('UNLINK', READY, LIVE, FLIGHT, SKIP)
redis.call('MSET', id_key(ARGV[7]), idx, COUNTER, idx, CLEAR, idx)
return { 'ok', '1', idx, idx, '1', ready_mark(SESSION, tonumber(ARGV[1]), false, listed_value, false, false, nil, nil, 'gone') }
