--@include session
-- index_type: extends one event type's index one page further back, toward
-- `after`, registering the type first when no log cursor read it yet. Writes
-- that need an index to reach back reply { 'index', type, after }; the caller
-- runs this until it replies '1', then runs the write again.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  the event type
-- ARGV[2]  after: the index must hold every event of the type above it
-- ARGV[3]  page size (stream entries read per call)
--
-- Replies: { '1' } the index reaches `after`; { '0' } call again.
read_bounds()
local name, after, page = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local entry = typed[name]
if not entry then
  entry = { total, total }
  typed[name] = entry
end
-- Entries below the clear marker belong to an old lifetime: never indexed.
local floor = math.max(after, boundary - 1)
if entry[1] > floor then
  local entries = redis.call('XREVRANGE', LOG, int(entry[1]) .. '-0', int(floor + 1) .. '-0', 'COUNT', page)
  local adds = {}
  for _, stored in ipairs(entries) do
    local fields = stored[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'type' then
        if fields[j + 1] == name then
          local idx = entry_index(stored[1])
          adds[#adds + 1] = idx
          adds[#adds + 1] = int(idx)
        end
        break
      end
    end
  end
  sliced('ZADD', type_key(name), adds)
  if #entries < page then
    entry[1] = after
  else
    entry[1] = entry_index(entries[#entries][1]) - 1
  end
elseif entry[1] > after then
  entry[1] = after
end
typed_dirty = true
commit()
return { entry[1] <= after and '1' or '0' }
