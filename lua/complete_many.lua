--@include cursor
-- complete_many: finishes several claimed attempts of one session whose
-- handlers returned no events, in one call. Each is fenced exactly as
-- complete fences one; the call as a whole is atomic: a head with no event,
-- a completion that had returned events, or a type index that must reach
-- further back first ends it before anything is written.
-- The store tries complete_fast first, which handles the common case
-- and hands the rest here with nothing written.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  served consumers: '' for all, else JSON (see cursor.use_served)
-- ARGV[3]  k, the number of attempts
-- then per attempt j (offset o = 3 + (j - 1) * 4):
--   ARGV[o+1] consumer, ARGV[o+2] tag ('#' or 'L<lane>'), ARGV[o+3] head
--   index, ARGV[o+4] attempt
-- then, optionally, a holder and a claim expiry (epoch ms): complete and
--   claim next, as complete_fast does. The new head of every lane or log
--   cursor this call moves on, when it may be claimed now (not scheduled
--   for later), goes to the holder as a first claim: it has just become its
--   cursor's head, so it was never claimed.
--
-- Replies:
--   { 'ok', outcome... }     per attempt: 'ok' (completed now), 'duplicate'
--                            (completed by an earlier try) or 'superseded';
--                            with a holder, then a table of { consumer,
--                            kind, index } per claimed next head (a lone
--                            one with its stream entry fourth), as
--                            complete_fast's
--   { 'missing', j }         no event at attempt j's index; nothing written
--   { 'partial', j }         attempt j's committed completion returned
--                            events (replay it with complete); nothing written
--   { 'index', type, after } index `type` down to `after`, then run again
read_bounds()
use_served(ARGV[2])
local now, k = ARGV[1], tonumber(ARGV[3])
local items, refs = {}, {}
for j = 1, k do
  local o = 3 + (j - 1) * 4
  local item = {
    consumer = ARGV[o + 1], tag = ARGV[o + 2],
    idx = tonumber(ARGV[o + 3]), attempt = ARGV[o + 4],
  }
  item.at = row_of(item.consumer, item.tag)
  items[j] = item
  refs[j] = { item.idx, item.at }
end
local rows = read_rows(refs, { COL_ATTEMPTS, COL_PROCESSED, COL_RETURNED, COL_HOLDER, COL_DEAD, COL_KIND, COL_NEXT, COL_PINS, COL_FAILURES, COL_LAST_FAILED_ATTEMPT })

-- Every fence first: nothing is buffered or written until all have passed.
local outcomes = { 'ok' }
for j, item in ipairs(items) do
  local row, idx, attempt = rows[j], item.idx, tonumber(item.attempt)
  local outcome = 'ok'
  if idx <= boundary then
    outcome = 'superseded'
  elseif idx < 1 or idx > total then
    return { 'missing', int(j) }
  elseif row[2] then
    local kind = row[6] or (item.tag == '#' and '#')
    if not owns(kind, item.tag) or processed_attempt(row[2]) ~= attempt then
      outcome = 'superseded'
    elseif row[3] and row[3] ~= '' and row[3] ~= '[]' then
      return { 'partial', int(j) }
    else
      outcome = 'duplicate'
    end
  elseif tonumber(row[1] or '0') ~= attempt or not row[4] or row[5] or not owns(row[6], item.tag) then
    outcome = 'superseded'
  end
  outcomes[j + 1] = outcome
end

-- Then the cursors move (buffered; a typed log cursor may still need its
-- index extended, which ends the call with nothing written).
for j, item in ipairs(items) do
  if outcomes[j + 1] == 'ok' then
    local row = rows[j]
    local moved, missing = advance(item.consumer, row[6], item.idx, row[7], {}, true)
    if not moved then return { 'index', missing, int(item.idx) } end
  end
end

-- Complete and claim next: every lane or log cursor moved on whose new
-- head is free now (its score a free one, or a scheduled time passed).
-- Still buffered; a lone claimed head's entry is read here, before the
-- writes.
local holder, expires_at = ARGV[4 + 4 * k], ARGV[5 + 4 * k]
local claimed, holds = false, nil
if holder and holder ~= '' then
  claimed = {}
  local stamp, until_ms = tonumber(now), tonumber(expires_at)
  for j, item in ipairs(items) do
    local kind = rows[j][6]
    if outcomes[j + 1] == 'ok' and kind ~= '#' then
      local cid = cid_of(item.consumer, kind)
      local score, head = ready_changes[cid], states[cid].h
      if head and score and (score < HELD or score - HELD <= stamp) then
        local at = row_of(item.consumer, kind)
        put_row(head, at, COL_ATTEMPTS, '1')
        put_row(head, at, COL_KIND, kind)
        put_row(head, at, COL_FIRST_CLAIMED, now)
        put_row(head, at, COL_LAST_CLAIMED, now)
        put_row(head, at, COL_HOLDER, holder)
        put_row(head, at, COL_EXPIRY, expires_at)
        hold(cid, until_ms)
        in_flight(item.consumer, 1)
        claimed[#claimed + 1] = { item.consumer, kind, int(head) }
      end
    end
  end
  -- What the index needs (ready_mark): whether a head is left free, and
  -- the earliest hold this call set.
  added_free, holds = false, false
  for _, cid in ipairs(ready_order) do
    local score = ready_changes[cid]
    if score and score > 0 and score < HELD then added_free = true end
    if score and score >= HELD and (not holds or score - HELD < holds) then holds = score - HELD end
  end
  local lone = #claimed == 1 and claimed[1][3]
  --@inline lone_entry
  if entry then claimed[1][4] = entry end
end

-- The head rows keep only their completion records. A claimed head has
-- its claim columns; the failure columns, the lane link and the pins are
-- dropped only where the row has them (building a field name costs).
local CLAIMED = { COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY }
local FAILED = { COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR }
for j, item in ipairs(items) do
  if outcomes[j + 1] == 'ok' then
    local row, idx, at = rows[j], item.idx, item.at
    put_row(idx, at, COL_PROCESSED, processed(now, item.attempt))
    for _, column in ipairs(CLAIMED) do drop_row(idx, at, column) end
    in_flight(item.consumer, -1)
    if row[9] or row[10] then
      for _, column in ipairs(FAILED) do drop_row(idx, at, column) end
    end
    if row[7] then drop_row(idx, at, COL_NEXT) end
    if row[6] == '#' then drop_row(idx, at, COL_KIND) end
    if row[8] then
      release_pins(idx, at, row[8])
      drop_row(idx, at, COL_PINS)
    end
  end
end
flush_states()
commit()
-- With a holder, the claimed heads follow the outcomes.
outcomes[#outcomes + 1] = claimed or nil
return with_ready(outcomes, now, false, holds)
