--@readonly
--@include session
-- cursors: every lane and log cursor (read against the clear marker) and
-- every event cursor with a head, with its position, head and the head's
-- dispatch columns.
--
-- KEYS[1]  the session counter
--
-- Reply: a list of { consumer, tag, position, head or nil, columns } with
-- columns d fc lc ch ce a lf lfa e f (empty when there is no head).
read_bounds()
local listed = {}
local records, order = cursor_records()
for _, cid in ipairs(order) do
  local record = records[cid]
  local consumer, tag = parse_cid(cid)
  local head = (record.h and record.h ~= '') and tonumber(record.h) or false
  local position = tonumber(record.p or '0')
  if head and head <= boundary then head = false end
  local kind = string.sub(tag, 1, 1)
  if kind == 'G' and position < boundary then position = boundary end
  if kind == 'G' or head or position > boundary then
    listed[#listed + 1] = { consumer, tag, position, head }
  end
end
-- An event cursor's id names its head.
for _, cid in ipairs(redis.call('ZRANGE', READY, 0, -1)) do
  local consumer, tag = parse_cid(cid)
  if string.sub(tag, 1, 1) == '#' then
    local head = tonumber(string.sub(tag, 2))
    listed[#listed + 1] = { consumer, '#', head - 1, head }
  end
end
local refs, positions = {}, {}
for position, cursor in ipairs(listed) do
  if cursor[4] then
    refs[#refs + 1] = { cursor[4], row_of(cursor[1], cursor[2]) }
    positions[#refs] = position
  end
end
local rows = read_rows(refs, { 'd', 'fc', 'lc', 'ch', 'ce', 'a', 'lf', 'lfa', 'e', 'f' })
local columns = {}
for k, position in ipairs(positions) do columns[position] = rows[k] end
local reply = {}
for position, cursor in ipairs(listed) do
  reply[#reply + 1] = {
    cursor[1], cursor[2], int(cursor[3]),
    cursor[4] and int(cursor[4]) or false, columns[position] or {},
  }
end
return reply
