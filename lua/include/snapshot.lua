--@include session
-- snapshot: the keys of one reducer's snapshots and how a stored snapshot
-- names its index.
--
-- A snapshot is stored as the text {"index":<index>,"state":<state JSON>},
-- written by Go with the index first, so scripts read the index with a
-- pattern and never decode the state (cjson differs between Redis and
-- miniredis, and a state may hold anything valid JSON allows).

-- The head snapshot key and the history zset key of a reducer.
local function snapshot_keys(reducer)
  return SESSION .. KEY_SNAP .. reducer, SESSION .. KEY_SNAP_HISTORY .. reducer
end

-- The index a stored snapshot names, or nil when the text is not a snapshot
-- this layout writes.
local function snapshot_index(text)
  local digits = string.match(text, '^{"index":(%d+),"state":')
  if not digits then return nil end
  return tonumber(digits)
end
