--@include session
-- fail: records a failed attempt. It counts a failure, records the error,
-- releases the claim, and either holds the head until a retry time or, at
-- max_failures, dead-letters it (the cursor stops there until a redrive).
-- Reporting the same failure again is idempotent.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  consumer
-- ARGV[2]  tag: '#' for an event cursor, 'L<lane>' for a lane or log cursor
-- ARGV[3]  head index
-- ARGV[4]  attempt
-- ARGV[5]  error text
-- ARGV[6]  max failures
-- ARGV[7]  now, epoch milliseconds
-- ARGV[8]  retry hold until, epoch milliseconds, or ''
--
-- Replies: { outcome, failures } with outcome 'failed', 'dead_lettered' or
-- 'superseded'; { 'missing', '0' } when no event has that index.
read_bounds()
local consumer, tag, idx, attempt = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local at = row_of(consumer, tag)
if idx <= boundary then return { 'superseded', '0' } end
if idx < 1 or idx > total then return { 'missing', '0' } end
local row = read_rows({ { idx, at } }, { COL_FAILURES, COL_ATTEMPTS, COL_PROCESSED, COL_DEAD, COL_LAST_FAILED_ATTEMPT, COL_HOLDER, COL_KIND, COL_PINS })[1]
if row[3] or (row[7] and not owns(row[7], tag)) then return { 'superseded', '0' } end
local failures = tonumber(row[1] or '0')
if tonumber(row[2] or '0') ~= attempt then return { 'superseded', int(failures) } end
-- This attempt's failure is already recorded: report it again.
if not row[6] and row[5] and tonumber(row[5]) == attempt then
  return { row[4] and 'dead_lettered' or 'failed', int(failures) }
end
if row[4] then return { 'dead_lettered', int(failures) } end
if not row[6] then return { 'superseded', int(failures) } end
failures = failures + 1
local dead = failures >= tonumber(ARGV[6])
put_row(idx, at, COL_FAILURES, int(failures))
put_row(idx, at, COL_ERROR, ARGV[5])
put_row(idx, at, COL_LAST_FAILED, ARGV[7])
put_row(idx, at, COL_LAST_FAILED_ATTEMPT, ARGV[4])
drop_row(idx, at, COL_HOLDER)
in_flight(consumer, -1)
local cid = cid_for(consumer, row[7], idx)
if dead then
  put_row(idx, at, COL_DEAD, ARGV[7])
  drop_row(idx, at, COL_EXPIRY)
  ready_set(cid, -idx, -1)
  release_pins(idx, at, row[8])
elseif ARGV[8] ~= '' then
  put_row(idx, at, COL_EXPIRY, ARGV[8])
  hold(cid, tonumber(ARGV[8]))
else
  drop_row(idx, at, COL_EXPIRY)
  ready_set(cid, idx, 0)
end
commit()
return with_ready({ dead and 'dead_lettered' or 'failed', int(failures) }, ARGV[7])
