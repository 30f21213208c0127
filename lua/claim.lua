--@include session
-- claim: claims a session's runnable heads for a holder. Every eligible head
-- (live, served, not excluded, at or below `through`, not held by an
-- unexpired claim or retry hold) is claimed, lowest index first, up to
-- `limit`; each claim bumps the head's attempt. Free heads score 1 … HELD-1
-- in the runnable set and held ones HELD + when they free up, so a claim
-- finds both by score and never scans the heads others hold. A head whose claim lapsed
-- counts a failure when taken over, and dead-letters without running once
-- failures reach max_failures. The store tries claim_fast first, which
-- handles the common case and hands the rest here with nothing written.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  holder
-- ARGV[2]  now, epoch milliseconds
-- ARGV[3]  claim expiry, epoch milliseconds
-- ARGV[4]  max failures for lapsed takeovers, or ''
-- ARGV[5]  served consumers: '' for all, else a JSON list of [name, ...]
-- ARGV[6]  the highest head index to claim, or ''
-- ARGV[7]  limit: the most heads to claim in this call
-- ARGV[8]  excluded count, then per excluded head: consumer, tag
--          ('#<index>' for an event cursor, 'L<lane>' for a lane or log cursor)
-- then     optionally, the offset to scan free heads from (a 'scan' reply's)
--
-- Replies:
--   { 'claimed', count, head..., clear index, session head } where each head
--       is { consumer, kind ('#', 'L<lane>' or 'G<lane>'), index, columns }
--       and columns are d fc lc ch ce a lf lfa e f (f set: dead-lettered by
--       this takeover, not to be run); a head claimed for the first time
--       has no columns: { consumer, kind, index }, columns 1, now, now,
--       holder, expiry, 0. The events are not in the reply.
--   { 'busy', earliest retry time }
--   { 'settled' }
--   { 'scan', offset }     the free-head scan was cut short (SCAN_CAP) with
--                          nothing found: call again from offset
--   { 'missing', index }   a head names an index past the session head
--                          (corruption); nothing written
local holder, now, expires_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local max_failures = tonumber(ARGV[4])
local through = ARGV[6] == '' and HELD - 1 or math.min(tonumber(ARGV[6]), HELD - 1)
local limit = tonumber(ARGV[7])
local served_all, served = ARGV[5] == '', {}
if not served_all then
  for _, entry in ipairs(cjson.decode(ARGV[5])) do served[entry[1]] = true end
end
local excluded = {}
for i = 1, tonumber(ARGV[8]) do
  excluded[ARGV[8 + (i - 1) * 2 + 1] .. '\0' .. ARGV[8 + (i - 1) * 2 + 2]] = true
end
read_bounds()

-- A cursor this call may claim: served, not excluded, its head at or below
-- `through`. Returns the candidate { idx, cid = cid }, or nil. Its row and
-- names are filled in only for the candidates kept (see name_candidate):
-- every string built costs, and a scan may look at more cursors than it
-- takes.
local open_to_all = served_all and tonumber(ARGV[8]) == 0
local function candidate_of(cid, idx)
  if idx > through then return nil end
  if open_to_all then return { idx, cid = cid } end
  local consumer, tag = parse_cid(cid)
  if not (served_all or served[consumer]) then return nil end
  local kind = string.sub(tag, 1, 1)
  if excluded[consumer .. '\0' .. (kind == 'G' and ('L' .. string.sub(tag, 2)) or tag)] then return nil end
  return { idx, cid = cid }
end
local function name_candidate(candidate)
  local consumer, tag = parse_cid(candidate.cid)
  candidate[2] = row_of(consumer, tag)
  candidate.consumer = consumer
  candidate.kind = string.sub(tag, 1, 1) == '#' and '#' or tag
end

-- Heads free to claim, lowest index first: runnable scores 1 … through.
local page_size = open_to_all and limit or (limit + tonumber(ARGV[8]) + 16)
-- One call scans at most SCAN_CAP runnable entries for free heads and as
-- many for a busy report, whatever the set holds (a call that serves some
-- consumers may meet many heads of the others). A free-head scan cut short
-- with nothing found replies { 'scan', offset } having written nothing, and
-- the store calls again from there.
local SCAN_CAP = math.max(1024, limit * 4)
local scan_from = tonumber(ARGV[9 + 2 * tonumber(ARGV[8])] or '0')
local candidates, offset, cut = {}, scan_from, false
while #candidates < limit do
  if offset >= scan_from + SCAN_CAP then
    cut = offset
    break
  end
  local page = redis.call('ZRANGEBYSCORE', READY, 1, through, 'WITHSCORES', 'LIMIT', offset, page_size)
  for i = 1, #page, 2 do
    local candidate = candidate_of(page[i], tonumber(page[i + 1]))
    if candidate then candidates[#candidates + 1] = candidate end
  end
  if #page < page_size * 2 then break end
  offset = offset + page_size
end
-- The heads of held cursors: an event cursor names its head; a lane or
-- log cursor's head is in its record. One HMGET for a page of them.
local function held_heads(cids)
  local heads, names, at = {}, {}, {}
  for i, cid in ipairs(cids) do
    local _, tag = parse_cid(cid)
    if string.sub(tag, 1, 1) == '#' then
      heads[i] = tonumber(string.sub(tag, 2))
    else
      names[#names + 1] = cid .. ':h'
      at[#names] = i
    end
  end
  if #names > 0 then
    local values = sliced('HMGET', CURSORS, names)
    for k, value in ipairs(values) do heads[at[k]] = tonumber(value or '') end
  end
  return heads
end

-- Held heads whose claim lapsed or whose retry hold ended (held scores up
-- to HELD + now), earliest first. Every one is read (they are few: holds
-- that ended unfinished), so the claim still takes the lowest indexes; a
-- pile larger than EXPIRED_SCAN is taken over in pieces, earliest first.
offset = 0
local EXPIRED_SCAN = math.max(1024, limit * 4)
while offset < EXPIRED_SCAN do
  local page = redis.call('ZRANGEBYSCORE', READY, '(' .. int(HELD), HELD + now, 'LIMIT', offset, page_size)
  if #page == 0 then break end
  local heads = held_heads(page)
  for i, cid in ipairs(page) do
    local candidate = heads[i] and candidate_of(cid, heads[i])
    if candidate then candidates[#candidates + 1] = candidate end
  end
  if #page < page_size then break end
  offset = offset + page_size
end

if #candidates == 0 and cut then return { 'scan', int(cut) } end
if #candidates == 0 then
  -- Busy when a served head is held: report when the first hold ends.
  offset = 0
  local first_hold = nil
  while true do
    if offset >= SCAN_CAP then
      -- Not reached: report the earliest hold seen (early is safe: the
      -- caller only looks again sooner).
      if first_hold then return { 'busy', int(first_hold - HELD) } end
      return { 'settled' }
    end
    local page = redis.call('ZRANGEBYSCORE', READY, '(' .. int(HELD + now), '+inf', 'WITHSCORES', 'LIMIT', offset, page_size)
    if #page == 0 then return { 'settled' } end
    first_hold = first_hold or tonumber(page[2])
    local cids = {}
    for i = 1, #page, 2 do cids[#cids + 1] = page[i] end
    local heads = held_heads(cids)
    for i = 1, #cids do
      if heads[i] and candidate_of(cids[i], heads[i]) then
        return { 'busy', int(tonumber(page[i * 2]) - HELD) }
      end
    end
    if #page < page_size * 2 then return { 'settled' } end
    offset = offset + page_size
  end
end

table.sort(candidates, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a.cid < b.cid
end)
for i = #candidates, limit + 1, -1 do candidates[i] = nil end
for _, candidate in ipairs(candidates) do name_candidate(candidate) end
local taken = {}
-- A head never claimed has no attempt column ('d') and nothing else this
-- claim reads that could matter (pins matter only to a lapsed claim), so
-- only the rows with an attempt are read in full: most heads are fresh,
-- and each field read costs.
local COLUMNS = { 'd', 'fc', 'lc', 'ch', 'ce', 'a', 'lf', 'lfa', 'e', 'f', 'pins' }
local attempts = read_rows(candidates, { 'd' })
local seen, seen_at = {}, {}
for position, candidate in ipairs(candidates) do
  if attempts[position][1] then
    seen[#seen + 1] = candidate
    seen_at[#seen] = position
  end
end
-- A fresh head's row, as read_rows gives a row with no fields (shared:
-- rows are only read).
local FRESH = { false, false, false, false, false, false, false, false, false, false, false }
local rows = {}
for position = 1, #candidates do rows[position] = FRESH end
for k, row in ipairs(read_rows(seen, COLUMNS)) do rows[seen_at[k]] = row end
for position, candidate in ipairs(candidates) do
  if #taken == limit then break end
  local row = rows[position]
  -- The runnable score mirrors the row's expiry; the row decides.
  if tonumber(row[5] or '0') <= now then
    taken[#taken + 1] = { candidate = candidate, row = row }
  end
end
if #taken == 0 then return { 'settled' } end

-- The events themselves are not read here: the store fetches them with a
-- plain XRANGE after the call (moving an entry into Lua and back out costs
-- the server far more than a native XRANGE). An index past the session
-- head is corruption, refused before anything is written.
for _, take in ipairs(taken) do
  if take.candidate[1] > total then return { 'missing', int(take.candidate[1]) } end
end

local reply = { 'claimed', int(#taken) }
for _, take in ipairs(taken) do
  local candidate, row = take.candidate, take.row
  local idx, at = candidate[1], candidate[2]
  local attempt = int(tonumber(row[1] or '0') + 1)
  -- A claim still held here lapsed: its attempt never finished.
  local lapsed = row[4] ~= false
  local failures = tonumber(row[6] or '0')
  if lapsed then
    failures = failures + 1
    put_row(idx, at, 'a', int(failures))
  end
  put_row(idx, at, 'd', attempt)
  put_row(idx, at, 'l', candidate.kind)
  local columns
  if lapsed and max_failures and failures >= max_failures then
    -- The takeover spent the last attempt: dead-letter it unclaimed. The
    -- bumped attempt fences the lapsed holder; nothing runs.
    put_row(idx, at, 'f', ARGV[2])
    drop_row(idx, at, 'ch')
    drop_row(idx, at, 'ce')
    ready_set(candidate.cid, -idx, -1)
    release_pins(idx, at, row[11])
    columns = { attempt, row[2], row[3], false, false, int(failures), row[7], row[8], row[9], ARGV[2] }
  else
    local first_claimed = row[2] or ARGV[2]
    put_row(idx, at, 'fc', first_claimed)
    put_row(idx, at, 'lc', ARGV[2])
    put_row(idx, at, 'ch', holder)
    put_row(idx, at, 'ce', expires_at)
    hold(candidate.cid, tonumber(expires_at))
    columns = { attempt, first_claimed, ARGV[2], holder, expires_at, int(failures), row[7], row[8], row[9], false }
  end
  if row == FRESH then
    -- A first claim: the columns are the request's own (attempt 1, claimed
    -- now by the holder until the expiry, no failures).
    reply[#reply + 1] = { candidate.consumer, candidate.kind, int(idx) }
  else
    reply[#reply + 1] = { candidate.consumer, candidate.kind, int(idx), columns }
  end
end
commit()
reply[#reply + 1] = int(boundary)
reply[#reply + 1] = int(total)
return with_ready(reply, now, true)
