--@include session
-- presence: the session's presence hash and how its entries name their
-- stamps.
--
-- A presence entry is {"a":<at>,"e":<expires at>,"s":<seen>,"v":<value>},
-- written by Go with both stamps first, so scripts read them with a pattern
-- instead of decoding the value. `a` is the sender's stamp (it orders
-- writes), `e` the store clock's expiry (it bounds the entry's life); both
-- are epoch milliseconds. A null value is a tombstone.
local PRESENCE = SESSION .. KEY_PRESENCE

-- The at and expires-at stamps of a stored entry, or nil when the text is
-- not an entry this layout writes.
local function stamps(entry)
  local a, e = string.match(entry, '^{"a":(%-?%d+),"e":(%-?%d+),')
  if not a then return nil, nil end
  return tonumber(a), tonumber(e)
end
