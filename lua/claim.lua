--@include session
-- claim: claims a session's runnable heads for a holder. Every eligible head
-- (live, served, not excluded, at or below `through`, not held by an
-- unexpired claim or retry hold) is claimed, lowest index first, up to
-- `limit`; each claim bumps the head's attempt. Free heads score 1 … HELD-1
-- in the runnable set and held ones HELD + when they free up, so a claim
-- finds both by score and never scans the heads others hold. A head whose
-- claim lapsed is taken over alone (the claim takes only it), records why
-- in its last error, counts a failure when it was the only head of the
-- session its holder lost, and dead-letters without running once failures
-- reach max_failures. The store tries claim_fast first, which
-- handles the common case and hands the rest here with nothing written.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  holder
-- ARGV[2]  now, epoch milliseconds
-- ARGV[3]  claim expiry, epoch milliseconds
-- ARGV[4]  max failures for lapsed takeovers, or '' (a served consumer's
--          own, in its entry, wins)
-- ARGV[5]  served consumers: '' for all, else a JSON list of [name, ...];
--          an entry [name, k] or [name, k, m] (numbers) limits that
--          consumer to k of the session's heads in flight when k > 0
--          (a2redis.Consumer.PerSession) and dead-letters its heads at m
--          failures (a2redis.Consumer.MaxFailures); a log consumer's entry
--          [name, lane, types, backfill, m] carries m fifth
-- ARGV[6]  the highest head index to claim, or ''
-- ARGV[7]  limit: the most heads to claim in this call
-- ARGV[8]  excluded count, then per excluded head: consumer, tag
--          ('#<index>' for an event cursor, 'L<lane>' for a lane or log cursor)
-- then     optionally, where to go on scanning free heads from (a 'scan'
--          reply's '<score>:<skip>')
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
--   { 'scan', from }       the free-head scan was cut short (SCAN_CAP) with
--                          nothing found: call again from `from`
--   { 'missing', index }   a head names an index past the session head
--                          (corruption); nothing written
--@inline claim_args
local max_failures = tonumber(ARGV[4])
local limit = tonumber(ARGV[7])
local served_all, served = ARGV[5] == '', {}
-- limits: consumer → how many more of its heads of the session may be in
-- flight now (its a2redis.Consumer.PerSession less its count in flight,
-- keys.Session.Flight); room: what is left of that as heads are taken.
local limits, room, limited = {}, {}, false
-- mfs: the served consumers' own max failures (a2redis.Consumer.MaxFailures).
local mfs = {}
if not served_all then
  local entries = cjson.decode(ARGV[5])
  --@inline served_set served_set=served
  local names = {}
  for _, entry in ipairs(entries) do
    if type(entry[2]) == 'number' then
      if entry[2] > 0 then
        limits[entry[1]] = entry[2]
        names[#names + 1] = entry[1]
        limited = true
      end
      mfs[entry[1]] = entry[3]
    else
      mfs[entry[1]] = entry[5]
    end
  end
  if limited then
    local counts = redis.call('HMGET', FLIGHT, unpack(names))
    for i, name in ipairs(names) do
      limits[name] = limits[name] - tonumber(counts[i] or '0')
      room[name] = limits[name]
    end
  end
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
  return { idx, cid = cid, limited = limits[consumer] and consumer }
end
-- A free head of a consumer with a per-session limit is a candidate only
-- while the consumer has room (lowest indexes first: the free scan runs in
-- index order); which candidates are taken is decided again below, with
-- the heads whose holds ended, in the order they are taken.
local function free_candidate(cid, idx)
  local candidate = candidate_of(cid, idx)
  if candidate and candidate.limited then
    local left = room[candidate.limited]
    if left <= 0 then return nil end
    room[candidate.limited] = left - 1
  end
  return candidate
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
-- with nothing found replies { 'scan', '<score>:<skip>' } having written
-- nothing, and the store calls again from there. The scan pages by score,
-- never by an offset from the start (a ZRANGEBYSCORE … LIMIT offset walks
-- every entry before the offset, so calls deep into a backlog of others'
-- heads took up to a second each): a page starts at the last score seen,
-- past the `skip` entries of that score already seen (ties are the heads
-- of one event: at most its targets and the log cursors).
local SCAN_CAP = math.max(CLAIM_SCAN, limit * 4)
local scan_min, scan_skip = 1, 0
local resume = ARGV[9 + 2 * tonumber(ARGV[8])]
if resume then
  local score, skip = string.match(resume, '^(%d+):(%d+)$')
  if not score then return redis.error_reply('ERR claim: bad scan position ' .. resume) end
  scan_min, scan_skip = tonumber(score), tonumber(skip)
end
-- Scan marks (keys.Session.Skip): a claim serving some consumers starts
-- its walk at the lowest mark among them (no free head of a consumer
-- scores below its mark), so the free heads of others that lie below are
-- not walked again. It tracks where each served consumer's first free head
-- lies and raises their marks as it walks on.
local track = not served_all
local marks, raise_from = nil, nil
if track then
  marks = skip_marks(skip_value) or {}
  -- No free head lies above the session head, so a mark past it cannot
  -- be right: it is dropped (and the key rewritten without it), and the
  -- walk starts over.
  local dropped = false
  for name, m in pairs(marks) do
    if type(m) ~= 'number' or m > total + 1 then marks[name], dropped = nil, true end
  end
  if dropped then skip_value, skip_dirty = cjson.encode(marks), true end
  local start = nil
  for name in pairs(served) do
    local m = marks[name] or 1
    if not start or m < start then start = m end
  end
  if start and start > scan_min then scan_min, scan_skip = start, 0 end
  -- This call sees in full what scores from scan_min on (the entries of
  -- scan_min skipped were seen by an earlier call, which may have met a
  -- served head among them): a mark rises only when this call saw
  -- everything from it on.
  if scan_skip == 0 then raise_from = scan_min end
end
local first_free = {}
local candidates, scanned, cut, exhausted = {}, 0, false, false
-- Whether a served consumer may still take a free head: one without a
-- per-session limit, or with room left. When none may, the free heads are
-- not scanned (a limited consumer's backlog would only be waded through).
local function free_room()
  if not limited then return true end
  for name in pairs(served) do
    if not limits[name] or room[name] > 0 then return true end
  end
  return false
end
while #candidates < limit and free_room() do
  if scanned >= SCAN_CAP then
    -- A walk that tracks marks goes on from the start of a score when
    -- the heads of that score seen are few (the next call reads them
    -- again, so it sees in full what it walks and may raise marks).
    if track and scan_skip < SCAN_CAP / 2 then scan_skip = 0 end
    cut = int(scan_min) .. ':' .. int(scan_skip)
    break
  end
  local page = redis.call('ZRANGEBYSCORE', READY, scan_min, through, 'WITHSCORES', 'LIMIT', scan_skip, page_size)
  for i = 1, #page, 2 do
    local score = tonumber(page[i + 1])
    -- (A head of a consumer not served is passed after one parse.)
    local consumer = track and parse_cid(page[i])
    if not track or served[consumer] then
      if track and not first_free[consumer] then first_free[consumer] = score end
      local candidate = free_candidate(page[i], score)
      if candidate then candidates[#candidates + 1] = candidate end
    end
    if score == scan_min then
      scan_skip = scan_skip + 1
    else
      scan_min, scan_skip = score, 1
    end
  end
  scanned = scanned + #page / 2
  if #page < page_size * 2 then
    exhausted = true
    break
  end
end
-- The served consumers' marks after the walk: a consumer's first free head
-- seen, else how far the walk saw every head (all of them up to `through`
-- when it ran out). Recorded once the walk passed SKIP_AFTER heads, and
-- kept up to date wherever a mark exists. A free head found below a mark
-- lowers it (a write that freed it without lowering would be a bug; the
-- walk mends it).
if raise_from then
  -- (No free score lies above the session head: a walk that ran out saw
  -- everything below it, whatever `through` allowed.)
  local reach = exhausted and math.min(through, total) + 1 or scan_min
  local changed = false
  for name in pairs(served) do
    local old = marks[name] or 1
    local found = first_free[name]
    if found and found < old then
      marks[name], changed = found, true
    elseif old >= raise_from and (scanned >= SKIP_AFTER or marks[name]) then
      local new = found or reach
      if new > old then marks[name], changed = new, true end
    end
  end
  if changed then skip_value, skip_dirty = cjson.encode(marks), true end
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
      names[#names + 1] = cid .. CURSOR_HEAD
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
-- Every such head is kept in `ended` (served or not): a takeover looks at
-- who else held a head of the session when that holder's claims lapsed.
-- The scan is bounded by the limit, not four times it as the free scan:
-- each ended head's row is read below when a takeover happens.
local offset = 0
local EXPIRED_SCAN = math.max(CLAIM_SCAN, limit)
local ended = {}
while offset < EXPIRED_SCAN do
  local page = redis.call('ZRANGEBYSCORE', READY, '(' .. int(HELD), HELD + now, 'LIMIT', offset, page_size)
  if #page == 0 then break end
  local heads = held_heads(page)
  for i, cid in ipairs(page) do
    local candidate = heads[i] and candidate_of(cid, heads[i])
    if candidate then candidates[#candidates + 1] = candidate end
    if heads[i] then ended[#ended + 1] = { heads[i], cid = cid } end
  end
  if #page < page_size then break end
  offset = offset + page_size
end

-- Nothing to take: busy when a served head is held (report when the first
-- hold ends), else settled.
local function busy_or_settled()
  local offset = 0
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
if #candidates == 0 and cut then
  skip_save()
  return { 'scan', cut }
end
if #candidates == 0 then
  local reply = busy_or_settled()
  skip_save()
  return reply
end

table.sort(candidates, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a.cid < b.cid
end)
-- With a per-session limit every candidate stays until the rows say which
-- hold a claim (a lapsed one, taken over, needs no room).
if not limited then
  for i = #candidates, limit + 1, -1 do candidates[i] = nil end
end
for _, candidate in ipairs(candidates) do name_candidate(candidate) end
local taken = {}
-- A head never claimed has no attempt column ('d') and nothing else this
-- claim reads that could matter (pins matter only to a lapsed claim), so
-- only the rows with an attempt are read in full: most heads are fresh,
-- and each field read costs.
local COLUMNS = { COL_ATTEMPTS, COL_FIRST_CLAIMED, COL_LAST_CLAIMED, COL_HOLDER, COL_EXPIRY, COL_FAILURES, COL_LAST_FAILED, COL_LAST_FAILED_ATTEMPT, COL_ERROR, COL_DEAD, COL_PINS }
local attempts = read_rows(candidates, { COL_ATTEMPTS })
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
-- room again: the free scan spent it on candidates.
for name, left in pairs(limits) do room[name] = left end
for position, candidate in ipairs(candidates) do
  if #taken == limit then break end
  local row = rows[position]
  -- The runnable score mirrors the row's expiry; the row decides.
  if tonumber(row[5] or '0') <= now then
    -- A head not held (a lapsed claim is) of a limited consumer takes room.
    local consumer = candidate.limited
    if consumer and not row[4] then
      if room[consumer] > 0 then
        room[consumer] = room[consumer] - 1
        taken[#taken + 1] = { candidate = candidate, row = row }
      end
    else
      taken[#taken + 1] = { candidate = candidate, row = row }
    end
  end
end
if #taken == 0 then
  local reply = busy_or_settled()
  skip_save()
  return reply
end

-- A takeover runs alone: a claim that takes over a lapsed head (its holder
-- still named: the attempt never finished) takes only that head, the
-- lowest, so the process that runs it runs nothing else of the session,
-- and a crash there is that head's own. A lapse counts a failure only when
-- the head was the only one of the session its holder lost. When the
-- holder lost several at once the crash may have been any one's: none
-- counts, the others are released (free again, their last error saying
-- why) and the lowest is taken over alone. Written below, with the claim.
local lost_with = nil
-- How many other heads the taken one lapsed with (lost_with may be cut).
local lost_others = 0
for _, take in ipairs(taken) do
  if take.row[4] then
    taken = { take }
    -- The heads whose holds ended that the same holder held (they are few).
    local refs = {}
    for k, entry in ipairs(ended) do
      local consumer, tag = parse_cid(entry.cid)
      refs[k] = { entry[1], row_of(consumer, tag) }
    end
    lost_with = {}
    for k, row in ipairs(read_rows(refs, { COL_HOLDER, COL_EXPIRY })) do
      if row[1] == take.row[4] and not (refs[k][1] == take.candidate[1] and ended[k].cid == take.candidate.cid) then
        lost_with[#lost_with + 1] = { ref = refs[k], cid = ended[k].cid, expiry = row[2] }
      end
    end
    -- One call releases at most TAKEOVER_RELEASE of them, earliest first;
    -- the next takeovers release the rest. A cut pile keeps at least two
    -- heads lapsed, so the head the last of those takeovers takes still
    -- lapsed with another and counts no failure either.
    lost_others = #lost_with
    if lost_others > TAKEOVER_RELEASE then
      for k = #lost_with, math.min(TAKEOVER_RELEASE, lost_others - 2) + 1, -1 do lost_with[k] = nil end
    end
    break
  end
end

-- An instant as text: UTC, to the millisecond (the last error is read by
-- people).
local function utc(ms)
  local s, frac = math.floor(ms / 1000), ms % 1000
  local z, rem = math.floor(s / 86400) + 719468, s % 86400
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, frac)
end

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
  local counted = false
  local last_failed, last_failed_attempt, last_error = row[7], row[8], row[9]
  if lapsed then
    -- The head says why: whose lease ran out when, who took it over.
    counted = lost_others == 0
    last_error = 'lease expired: held by ' .. row[4] .. ' until ' .. utc(tonumber(row[5] or '0')) ..
      ', taken over by ' .. holder .. ' at ' .. utc(now)
    if counted then
      failures = failures + 1
      last_failed, last_failed_attempt = ARGV[2], row[1]
      put_row(idx, at, COL_FAILURES, int(failures))
      put_row(idx, at, COL_LAST_FAILED, last_failed)
      put_row(idx, at, COL_LAST_FAILED_ATTEMPT, last_failed_attempt)
    else
      local why = ' (no failure counted: it lapsed with ' .. int(lost_others) ..
        ' other heads of the session, so the crash may have been another\'s)'
      last_error = last_error .. why
      for _, other in ipairs(lost_with) do
        put_row(other.ref[1], other.ref[2], COL_ERROR, 'lease expired: held by ' .. row[4] .. ' until ' ..
          utc(tonumber(other.expiry or '0')) .. ', released by ' .. holder .. ' at ' .. utc(now) .. why)
        drop_row(other.ref[1], other.ref[2], COL_HOLDER)
        drop_row(other.ref[1], other.ref[2], COL_EXPIRY)
        ready_set(other.cid, other.ref[1], 0)
        in_flight((parse_cid(other.cid)), -1)
      end
    end
    put_row(idx, at, COL_ERROR, last_error)
  end
  put_row(idx, at, COL_ATTEMPTS, attempt)
  put_row(idx, at, COL_KIND, candidate.kind)
  local columns
  local mf = mfs[candidate.consumer] or max_failures
  if counted and mf and failures >= mf then
    -- The takeover spent the last attempt: dead-letter it unclaimed. The
    -- bumped attempt fences the lapsed holder; nothing runs.
    put_row(idx, at, COL_DEAD, ARGV[2])
    drop_row(idx, at, COL_HOLDER)
    drop_row(idx, at, COL_EXPIRY)
    ready_set(candidate.cid, -idx, -1)
    in_flight(candidate.consumer, -1)
    release_pins(idx, at, row[11])
    columns = { attempt, row[2], row[3], false, false, int(failures), last_failed, last_failed_attempt, last_error, ARGV[2] }
  else
    local first_claimed = row[2] or ARGV[2]
    put_row(idx, at, COL_FIRST_CLAIMED, first_claimed)
    put_row(idx, at, COL_LAST_CLAIMED, ARGV[2])
    put_row(idx, at, COL_HOLDER, holder)
    put_row(idx, at, COL_EXPIRY, expires_at)
    hold(candidate.cid, tonumber(expires_at))
    if not lapsed then in_flight(candidate.consumer, 1) end
    columns = { attempt, first_claimed, ARGV[2], holder, expires_at, int(failures), last_failed, last_failed_attempt, last_error, false }
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
