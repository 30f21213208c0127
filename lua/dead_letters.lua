--@readonly
--@include session
-- dead_letters: the session's dead-lettered heads above the clear marker.
--
-- KEYS[1]  the session counter
--
-- Reply: a list of { consumer, tag, index, columns, entry }, with columns
-- d fc lc ch ce a lf lfa e f.
local dead = redis.call('ZRANGEBYSCORE', READY, '-inf', '(0', 'WITHSCORES')
if #dead == 0 then return {} end
read_bounds()
local refs, items = {}, {}
for i = 1, #dead, 2 do
  local consumer, tag = parse_cid(dead[i])
  local idx = -tonumber(dead[i + 1])
  if idx > boundary then
    refs[#refs + 1] = { idx, row_of(consumer, tag) }
    items[#items + 1] = { consumer, tag, idx }
  end
end
local rows = read_rows(refs, { 'd', 'fc', 'lc', 'ch', 'ce', 'a', 'lf', 'lfa', 'e', 'f' })
local reply = {}
for k, item in ipairs(items) do
  local at = int(item[3]) .. '-0'
  local entry = redis.call('XRANGE', LOG, at, at)[1]
  if entry then
    reply[#reply + 1] = { item[1], item[2], int(item[3]), rows[k], entry }
  end
end
return reply
