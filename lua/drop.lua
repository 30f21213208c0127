--@include session
-- drop: the last step of a session's drop (redisstore.Store.Drop), run once
-- the drop's clear marker is in and reclaim has deleted everything below it:
-- removes what the collapsed session still holds — its snapshots (a bounded
-- number of reducers per call), then, in the call that finds none left,
-- every remaining key of the session at once: the log holding only the
-- marker, the clear key, the listed record, cursors, presence and the rest.
-- After that call the session has no key: the next append starts a fresh
-- session at index 1.
--
-- A drop never deletes work it did not end: when the session holds events
-- after the drop's marker (an append that committed after the clear), or a
-- newer clear, the drop stops there and the new lifetime stays.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  the drop's clear index (the marker its clear wrote or found)
-- ARGV[2]  how many reducers' snapshots one call deletes at most
--
-- Replies:
--   { 'done', version }  the session has no key left; version: the ready
--                        version its listed record held ('0' for none)
--   { 'more' }           snapshots deleted; run again
--   { 'fresh', head }    a new lifetime began after the marker: kept
--   { 'reclaim' }        entries below the marker or a sweep remain
local values = redis.call('MGET', COUNTER, CLEAR, SESSION .. KEY_LISTED, SESSION .. KEY_SWEEP)
local marker = tonumber(ARGV[1])
boundary = clear_index(values[2])
total = tonumber(values[1]) or boundary
if boundary ~= marker or total ~= boundary then return { 'fresh', int(total) } end
if values[4] then return { 'reclaim' } end
if boundary > 1 and #redis.call('XRANGE', LOG, '-', int(boundary - 1) .. '-0', 'COUNT', 1) > 0 then
  return { 'reclaim' }
end
local reducers = SESSION .. KEY_SNAP_REDUCERS
local taken = redis.call('SPOP', reducers, ARGV[2])
if #taken > 0 then
  local gone = {}
  for _, reducer in ipairs(taken) do
    gone[#gone + 1] = SESSION .. KEY_SNAP .. reducer
    gone[#gone + 1] = SESSION .. KEY_SNAP_HISTORY .. reducer
  end
  sliced('UNLINK', nil, gone)
  return { 'more' }
end
local version = string.match(values[3] or '', '^(%d+):') or '0'
-- UNLINK frees a big value (a cursors or presence hash) off the main thread.
redis.call('UNLINK', COUNTER, CLEAR, LOG, LIVE, FLIGHT, SKIP, SESSION .. KEY_FLOOR, READY, CURSORS, PINS, TYPED, reducers,
  SESSION .. KEY_LISTED, SESSION .. KEY_SWEEP, SESSION .. KEY_SWEEP_DROP, SESSION .. KEY_PRESENCE,
  SESSION .. KEY_FOLLOWED, SESSION .. KEY_HEADS .. '0')
return { 'done', version }
