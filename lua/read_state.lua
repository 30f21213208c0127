--@readonly
--@include snapshot
-- read_state: one atomic read of a reducer's snapshot at or below a bound,
-- the session's log frontier and its latest clear marker. Snapshots from
-- before the clear marker are ignored.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  reducer name
-- ARGV[2]  the highest snapshot index wanted, or '' for the newest
--
-- Replies:
--   { 'ok', snapshot text or '', frontier, clear index }
--       snapshot text is {"index":<index>,"state":<state JSON>}; the
--       frontier is the session head (the clear marker after a collapse)
--   { 'invalid' }  the stored head snapshot is not one this layout writes
local HEAD, HISTORY = snapshot_keys(ARGV[1])
local bounds = redis.call('MGET', COUNTER, CLEAR)
local clear = clear_index(bounds[2])
local frontier = bounds[1] or int(clear)
local through = tonumber(ARGV[2])

local chosen = false
local head = redis.call('GET', HEAD)
if head then
  local index = snapshot_index(head)
  if not index then return { 'invalid' } end
  if index >= clear and (not through or index <= through) then chosen = head end
end
if not chosen then
  local upper = through and int(through) or '+inf'
  local found = redis.call('ZREVRANGEBYSCORE', HISTORY, upper, int(clear), 'LIMIT', 0, 1)
  if found[1] then chosen = found[1] end
end
return { 'ok', chosen or '', frontier, int(clear) }
