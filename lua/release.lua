--@include session
-- release: gives claimed attempts back without counting a failure (for a
-- worker that stops, or a handler that snoozes). Each attempt is fenced as
-- a completion is: it must still hold its head (same attempt, claim not
-- failed, completed or dead-lettered); else it is superseded. A released
-- head is free to claim again at once, or held until `until` (a snooze),
-- and its next claim counts no failure for this attempt.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  free again at (epoch ms), or '' for at once
-- ARGV[3]  n, then per attempt: consumer, tag ('#' or 'L<lane>'), index,
--          attempt
--
-- Reply: { outcome... } per attempt in request order: 'released' or
-- 'superseded'.
read_bounds()
local hold_until = ARGV[2] ~= '' and tonumber(ARGV[2]) or false
local refs, items, outcomes = {}, {}, {}
for i = 1, tonumber(ARGV[3]) do
  local o = 3 + (i - 1) * 4
  local idx = tonumber(ARGV[o + 3])
  outcomes[i] = 'superseded'
  if idx > boundary and idx <= total then
    local row = row_of(ARGV[o + 1], ARGV[o + 2])
    refs[#refs + 1] = { idx, row }
    items[#items + 1] = { position = i, idx = idx, row = row, consumer = ARGV[o + 1], tag = ARGV[o + 2], attempt = tonumber(ARGV[o + 4]) }
  end
end
local rows = read_rows(refs, { COL_ATTEMPTS, COL_HOLDER, COL_PROCESSED, COL_DEAD, COL_KIND })
local done = {}
for k, item in ipairs(items) do
  local row = rows[k]
  local key = item.idx .. ':' .. item.row
  if not done[key] and row[2] and not row[3] and not row[4] and owns(row[5], item.tag) and
     tonumber(row[1] or '0') == item.attempt then
    done[key] = true
    drop_row(item.idx, item.row, COL_HOLDER)
    in_flight(item.consumer, -1)
    local cid = cid_for(item.consumer, row[5], item.idx)
    if hold_until then
      put_row(item.idx, item.row, COL_EXPIRY, int(hold_until))
      hold(cid, hold_until)
    else
      drop_row(item.idx, item.row, COL_EXPIRY)
      ready_set(cid, item.idx, 0)
    end
    outcomes[item.position] = 'released'
  end
end
commit()
return with_ready(outcomes, ARGV[1])
