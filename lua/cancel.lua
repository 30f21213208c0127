--@include cursor
-- cancel: skips a consumer's live head without running it (Store.Cancel):
-- free, held (a retry or snooze hold, or a scheduled time), or claimed by a
-- running attempt. Its cursor moves past it as a completion would (an event
-- cursor ends, a lane or log cursor takes its next head), and its row keeps
-- the completion record of attempt 0 ('p', as a skip) and the cancel time
-- ('x'): a running attempt's later completion, failure, renewal or release
-- finds the head processed by another attempt and is superseded. A
-- dead-lettered head is left to Redrive.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  consumer
-- ARGV[2]  head index
-- ARGV[3]  tag: '#' for the consumer's event cursor, 'L<lane>' for a lane or
--          log cursor
-- ARGV[4]  now, epoch milliseconds
-- ARGV[5]  served consumers: '' for all, else JSON (see cursor.use_served)
--
-- Replies: { outcome, has_pending, attempts } where outcome is 'cancelled',
--          'dead' (dead-lettered: nothing written) or 'none' (no head of
--          that cursor at that index: done, cleared or never), attempts the
--          head's attempts before the cancel (0: it never ran) |
--          { 'index', type, after } (index `type` down to `after`, run again)
read_bounds()
use_served(ARGV[5])
local consumer, idx, want, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local function reply(outcome, attempts) return { outcome, has_pending(), attempts or 0 } end
if idx <= boundary or idx < 1 or idx > total then return reply('none') end

-- The cursor: the event cursor of idx, or the lane or log cursor of the
-- lane whose head is idx.
local cid, kind = nil, nil
if want == '#' then
  cid, kind = cid_of(consumer, '#' .. int(idx)), '#'
else
  local lane = string.sub(want, 2)
  local lane_cid, log_cid = cid_of(consumer, 'L' .. lane), cid_of(consumer, 'G' .. lane)
  local heads = redis.call('HMGET', CURSORS, lane_cid .. CURSOR_HEAD, log_cid .. CURSOR_HEAD)
  if record_head(heads[1]) == idx then
    cid, kind = lane_cid, 'L' .. lane
  elseif record_head(heads[2]) == idx then
    cid, kind = log_cid, 'G' .. lane
  end
end
if not cid then return reply('none') end
local score = redis.call('ZSCORE', READY, cid)
if not score then return reply('none') end
if tonumber(score) < 0 then return reply('dead') end

local at = row_of(consumer, want)
local row = read_rows({ { idx, at } }, { COL_ATTEMPTS, COL_PROCESSED, COL_NEXT, COL_PINS, COL_HOLDER })[1]
if row[2] then return reply('none') end
local moved, missing = advance(consumer, kind, idx, row[3], {}, true)
if not moved then return { 'index', missing, int(idx) } end
put_row(idx, at, COL_PROCESSED, processed(now, 0))
put_row(idx, at, COL_CANCELLED, now)
if kind ~= '#' then put_row(idx, at, COL_KIND, kind) end
for _, column in ipairs({ COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY, COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR, COL_NEXT, COL_PINS }) do
  drop_row(idx, at, column)
end
if kind == '#' then drop_row(idx, at, COL_KIND) end
-- A running attempt's claim ends here (its holder is superseded).
if row[5] then in_flight(consumer, -1) end
release_pins(idx, at, row[4])
flush_states()
commit()
return with_ready(reply('cancelled', int(tonumber(row[1] or '0'))), now)
