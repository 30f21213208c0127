--@include session
-- renew: extends the holder's live claims. A head whose attempt moved on, or
-- that its cursor moved past, is superseded; a head the cursor has not
-- reached (or another cursor's row) holds nothing to renew and is reported
-- in neither list.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  holder
-- ARGV[2]  now, epoch milliseconds
-- ARGV[3]  new expiry, epoch milliseconds
-- ARGV[4]  n, then per claim: consumer, tag ('#' or 'L<lane>'), index, attempt
--
-- Reply: { renewed count, renewed positions..., superseded positions... }
-- (1-based positions in the request)
read_bounds()
local holder, now, expires_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local refs, items, superseded = {}, {}, {}
for i = 1, tonumber(ARGV[4]) do
  local o = 4 + (i - 1) * 4
  local idx = tonumber(ARGV[o + 3])
  if idx <= boundary then
    superseded[#superseded + 1] = int(i)
  else
    local row = row_of(ARGV[o + 1], ARGV[o + 2])
    refs[#refs + 1] = { idx, row }
    items[#items + 1] = {
      position = i, idx = idx, row = row, consumer = ARGV[o + 1], tag = ARGV[o + 2], attempt = tonumber(ARGV[o + 4]),
    }
  end
end
local rows = read_rows(refs, { COL_ATTEMPTS, COL_EXPIRY, COL_PROCESSED, COL_DEAD, COL_HOLDER, COL_KIND })
local renewed = {}
for k, item in ipairs(items) do
  local row = rows[k]
  local attempt = tonumber(row[1] or '0')
  if row[6] and not owns(row[6], item.tag) then
    -- Another cursor's row: this one never claimed it.
  elseif row[3] or attempt > item.attempt then
    superseded[#superseded + 1] = int(item.position)
  elseif attempt == item.attempt and tonumber(expires_at) > now and
         not row[4] and row[5] == holder and tonumber(row[2] or '0') > now then
    put_row(item.idx, item.row, COL_EXPIRY, expires_at)
    hold(cid_for(item.consumer, row[6], item.idx), tonumber(expires_at))
    renewed[#renewed + 1] = int(item.position)
  end
end
commit()
local reply = { int(#renewed) }
for _, position in ipairs(renewed) do reply[#reply + 1] = position end
for _, position in ipairs(superseded) do reply[#reply + 1] = position end
return with_ready(reply, now, false, #renewed > 0 and tonumber(expires_at) or false)
