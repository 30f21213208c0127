--@include session
-- complete_event: complete for an event cursor whose handler returned no
-- events — the common case, without the cursor machinery complete loads.
-- Same fence and replies as complete for that case.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  consumer
-- ARGV[3]  head index
-- ARGV[4]  attempt
--
-- Replies:
--   { 'ok', first index (the session head + 1: nothing was appended) }
--   { 'duplicate' }     a retry of the committed completion (no events)
--   { 'superseded' }    the attempt no longer owns the head
--   { 'missing' }       no event at that index
--   { 'partial' }       the committed completion returned events
read_bounds()
local consumer, idx, attempt = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if idx <= boundary then return { 'superseded' } end
if idx < 1 or idx > total then return { 'missing' } end
local at = row_of(consumer, '#')
local row = read_rows({ { idx, at } }, { COL_ATTEMPTS, COL_PROCESSED, COL_RETURNED, COL_HOLDER, COL_DEAD, COL_KIND, COL_PINS, COL_FAILURES })[1]
if row[2] then
  if processed_attempt(row[2]) ~= attempt then return { 'superseded' } end
  if row[3] and row[3] ~= '' and row[3] ~= '[]' then return { 'partial' } end
  return { 'duplicate' }
end
if tonumber(row[1] or '0') ~= attempt or not row[4] or row[5] or row[6] ~= '#' then
  return { 'superseded' }
end
local cid = cid_of(consumer, '#' .. int(idx))
ready_set(cid, false, -1)
put_row(idx, at, COL_PROCESSED, processed(ARGV[1], ARGV[4]))
-- The head row keeps only its completion record.
local spent = { COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY, COL_KIND }
if row[8] then
  for _, column in ipairs({ COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR }) do spent[#spent + 1] = column end
end
for _, column in ipairs(spent) do drop_row(idx, at, column) end
in_flight(consumer, -1)
release_pins(idx, at, row[7])
drop_row(idx, at, COL_PINS)
commit()
return with_ready({ 'ok', int(total + 1) }, ARGV[1])
