--@include presence
-- presence_prune: deletes presence entries a read found expired, checking
-- each one's expiry again in this atomic step, so a reader that saw a field
-- expire never deletes it after a concurrent write refreshed it.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now: the store clock, epoch milliseconds
-- ARGV[2...] the hash fields (JSON [participant, field]) to check
--
-- Reply: { 'ok', deleted }
local now = tonumber(ARGV[1])
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local stored = sliced('HMGET', PRESENCE, fields)
local stale = {}
for i = 1, #fields do
  if stored[i] then
    local _, e = stamps(stored[i])
    if e and e <= now then stale[#stale + 1] = fields[i] end
  end
end
sliced('HDEL', PRESENCE, stale)
return { 'ok', int(#stale) }
