--@include session
-- compact_log: rebuilds a small settled session to its size. Redis keeps a
-- 4 KB listpack for a stream's newest node until the node fills (a 1-entry
-- stream costs ~4.7 KB); DUMP + RESTORE (REPLACE, no expiry) writes the
-- same stream — entries, last id, entries added — at its size. The head
-- chunks of the log's indexes are rebuilt the same way without their pin
-- field (CHUNK_PIN, see util): the pin keeps a chunk in hashtable encoding
-- for the writes of live heads, and a settled chunk of a few hundred
-- completed rows costs a sixth as much as a listpack, which RESTORE makes
-- of a hash within the server's listpack bounds (the next write to the
-- chunk sets the pin again, which turns it back into a hashtable). A live
-- count of 0 is deleted (no key reads as 0). The store runs it when a
-- write left the session without work (its ready update says so), never
-- on a key-locking server (which refuses DUMP).
--
-- Every read comes before the first write, so a script that fails has
-- written nothing; a server that cannot DUMP a stream (miniredis) is
-- left as it is.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  the most entries a log may hold to be rebuilt (a bound on the
--          call's work)
-- ARGV[2]  the most fields a head chunk may hold to be rebuilt
-- ARGV[3]  the most bytes (MEMORY USAGE) the log, or a chunk, may take to
--          be rebuilt: with ARGV[1] and ARGV[2], a bound on the call's work
--
-- Reply: 1 when the session was rebuilt; 2 when its log is past ARGV[1] or
-- ARGV[3] (it only grows until a reclaim: the store stops asking); else 0
-- (no log, the session has live heads again, or the server cannot DUMP).
local values = redis.call('MGET', LIVE, COUNTER, CLEAR)
if values[1] and values[1] ~= '0' then return 0 end
local n = redis.call('XLEN', LOG)
if n == 0 then return 0 end
if n > tonumber(ARGV[1]) then return 2 end
local bytes = tonumber(ARGV[3])
-- A server that cannot tell a key's size or DUMP a stream (miniredis) is
-- left as it is.
local size = redis.pcall('MEMORY', 'USAGE', LOG)
if type(size) ~= 'number' then return 0 end
if size > bytes then return 2 end
local payload = redis.pcall('DUMP', LOG)
if type(payload) ~= 'string' then return 0 end
-- The log is dense from its first entry to the session's head: with at
-- most ARGV[1] entries its rows lie in one or two chunks.
local first = redis.call('XRANGE', LOG, '-', '+', 'COUNT', 1)
local head = tonumber(values[2]) or clear_index(values[3])
local low = tonumber(string.match(first[1][1], '^(%d+)'))
local chunks = {}
if head >= low then
  for c = math.floor((low - 1) / CHUNK), math.floor((head - 1) / CHUNK) do
    local key = SESSION .. KEY_HEADS .. int(c)
    local fields = redis.call('HLEN', key)
    if fields > 0 and fields <= tonumber(ARGV[2]) and redis.call('MEMORY', 'USAGE', key) <= bytes then
      chunks[#chunks + 1] = key
    end
  end
end
for _, key in ipairs(chunks) do
  redis.call('HDEL', key, CHUNK_PIN)
  -- A chunk holding only its pin is gone with it.
  if redis.call('EXISTS', key) == 1 then
    redis.call('RESTORE', key, 0, redis.call('DUMP', key), 'REPLACE')
  end
end
if values[1] then redis.call('DEL', LIVE) end
redis.call('RESTORE', LOG, 0, payload, 'REPLACE')
return 1
