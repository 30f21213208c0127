--@readonly
--@include page
-- cursors: one page of a session's cursors (Store.CursorsPage). The lane
-- and log cursors come first, from the cursors hash (read against the
-- clear marker) one HSCAN step per page; then every event cursor with a
-- head, from the runnable set in score order. Each comes with its
-- position, head and the head's dispatch columns. A page lists at most
-- `limit` cursors and reads about as many records or runnable members, so
-- no call holds the server long however many cursors the session has.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  limit: the most cursors the page lists
-- ARGV[2]  where the page starts: 'h' (the cursors hash) or 'e' (the
--          runnable set)
-- ARGV[3]  'h': the HSCAN cursor of the step to read ('0' to start);
--          'e': the score the previous page's last member had ('' to start)
-- ARGV[4]  'h': how many records of that step earlier pages listed (a step
--          may hold more than `limit`); 'e': the previous page's last
--          member ('' to start)
--
-- Reply: { next, cursor... } where next is {} after the last page, else
-- where the next one starts: { 'h', scan cursor, records listed } or
-- { 'e', score, member }; and each cursor is { consumer, tag, position,
-- head or false, columns } with columns d fc lc ch ce a lf lfa e f (empty
-- when there is no head).
local limit = tonumber(ARGV[1])
local listed, next_page = {}, {}
if ARGV[2] == 'h' then
  read_clear()
  local step = redis.call('HSCAN', CURSORS, ARGV[3], 'COUNT', int(limit))
  -- A record's fields are <cid>:h, :p, :t, :ty; every record has :p.
  local fields, skip, seen = step[2], tonumber(ARGV[4]), 0
  local cids, positions = {}, {}
  for i = 1, #fields, 2 do
    if string.sub(fields[i], -2) == ':p' then
      seen = seen + 1
      if seen > skip then
        if #cids == limit then break end
        cids[#cids + 1] = string.sub(fields[i], 1, -3)
        positions[#cids] = tonumber(fields[i + 1])
      end
    end
  end
  if seen > skip + #cids then
    next_page = { 'h', ARGV[3], int(skip + #cids) }
  elseif step[1] ~= '0' then
    next_page = { 'h', step[1], '0' }
  else
    next_page = { 'e', '', '' }
  end
  local names = {}
  for k, cid in ipairs(cids) do names[k] = cid .. CURSOR_HEAD end
  local heads = sliced('HMGET', CURSORS, names)
  for k, cid in ipairs(cids) do
    local consumer, tag = parse_cid(cid)
    local h, position = heads[k], positions[k]
    local head = record_head(h)
    local kind = string.sub(tag, 1, 1)
    if kind == 'G' and position < boundary then position = boundary end
    if kind == 'G' or head or position > boundary then
      listed[#listed + 1] = { consumer, tag, position, head }
    end
  end
else
  -- An event cursor's id names its head; lane and log cursors were listed
  -- from their records.
  local page = ready_page(ARGV[3], ARGV[4], limit, false, '-inf')
  for i = 1, #page, 2 do
    local consumer, tag = parse_cid(page[i])
    if string.sub(tag, 1, 1) == '#' then
      local head = tonumber(string.sub(tag, 2))
      listed[#listed + 1] = { consumer, '#', head - 1, head }
    end
  end
  if #page == 2 * limit then next_page = { 'e', page[#page], page[#page - 1] } end
end
local refs, positions = {}, {}
for position, cursor in ipairs(listed) do
  if cursor[4] then
    refs[#refs + 1] = { cursor[4], row_of(cursor[1], cursor[2]) }
    positions[#refs] = position
  end
end
local rows = read_dispatch(refs)
local columns = {}
for k, position in ipairs(positions) do columns[position] = rows[k] end
local reply = { next_page }
for position, cursor in ipairs(listed) do
  reply[#reply + 1] = {
    cursor[1], cursor[2], int(cursor[3]),
    cursor[4] and int(cursor[4]) or false, columns[position] or {},
  }
end
return reply
