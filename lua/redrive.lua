--@include cursor
-- redrive: acts on a consumer's dead-lettered head. 'retry' clears its
-- failures and makes it runnable again; 'skip' moves its cursor past it.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  consumer
-- ARGV[2]  head index
-- ARGV[3]  action: 'retry' or 'skip'
-- ARGV[4]  now, epoch milliseconds
-- ARGV[5]  served consumers: '' for all, else JSON (see cursor.use_served)
-- ARGV[6]  tag: '#' for the consumer's event cursor, 'L<lane>' for a lane or
--          log cursor
--
-- Replies: { redriven ('1' or '0'), has_pending } |
--          { 'index', type, after } (index `type` down to `after`, run again)
read_bounds()
use_served(ARGV[5])
local consumer, idx = ARGV[1], tonumber(ARGV[2])
local function reply(redriven) return { redriven, has_pending() } end
if idx <= boundary or idx < 1 or idx > total then return reply('0') end
local cid, tag = nil, nil
for _, member in ipairs(redis.call('ZRANGEBYSCORE', READY, -idx, -idx)) do
  local owner, member_tag = parse_cid(member)
  local member_kind = string.sub(member_tag, 1, 1) == '#' and '#' or member_tag
  if owner == consumer and owns(member_kind, ARGV[6]) then
    cid, tag = member, member_tag
    break
  end
end
if not cid then return reply('0') end
local kind = string.sub(tag, 1, 1) == '#' and '#' or tag
local at = row_of(consumer, tag)
if ARGV[3] == 'skip' then
  local row = read_rows({ { idx, at } }, { COL_NEXT })[1]
  local moved, missing = advance(consumer, kind, idx, row[1], {}, false)
  if not moved then return { 'index', missing, int(idx) } end
  put_row(idx, at, COL_PROCESSED, processed(ARGV[4], 0))
  flush_states()
else
  drop_row(idx, at, COL_DEAD)
  drop_row(idx, at, COL_FAILURES)
  ready_set(cid, idx, 1)
end
dead_touched = true
commit()
return with_ready(reply('1'), ARGV[4])
