--@include presence
-- presence_set: field-wise last-writer-wins by the sender's stamp. A stored
-- entry survives an incoming one only while it is unexpired and strictly
-- newer; ties go to the incoming write. Tombstones (null values) are
-- entries like any other, so a delete keeps its stamp until it expires and
-- an older write that arrives after it still loses. An entry this layout
-- does not write is replaced. When anything is applied, the whole hash's TTL
-- is raised to at least ttl: the coarse bound (in Redis time) behind the
-- per-entry `e` stamp (in the store's clock), which reads check.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  at: the sender's stamp, epoch milliseconds
-- ARGV[2]  now: the store clock, epoch milliseconds
-- ARGV[3]  ttl, milliseconds (positive)
-- ARGV[4]  n, the number of fields
-- then per field i (offset o = 4 + (i - 1) * 2):
--   ARGV[o+1] hash field (JSON [participant, field]), ARGV[o+2] entry JSON
--
-- Reply: { 'ok', position... }  the 1-based positions of the applied fields
local at, now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local fields = {}
for i = 1, n do fields[i] = ARGV[4 + (i - 1) * 2 + 1] end
local stored = sliced('HMGET', PRESENCE, fields)
local writes, reply = {}, { 'ok' }
for i = 1, n do
  local wins = true
  if stored[i] then
    local a, e = stamps(stored[i])
    if a and e > now and a > at then wins = false end
  end
  if wins then
    writes[#writes + 1] = fields[i]
    writes[#writes + 1] = ARGV[4 + (i - 1) * 2 + 2]
    reply[#reply + 1] = int(i)
  end
end
if #writes > 0 then
  sliced('HSET', PRESENCE, writes)
  local left = redis.call('PTTL', PRESENCE)
  if left < ttl then redis.call('PEXPIRE', PRESENCE, int(ttl)) end
end
return reply
