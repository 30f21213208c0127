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
local log, head = LOG, tonumber(values[2]) or clear_index(values[3])
local max_entries, max_fields, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local compact_read = redis.call
local compacted = 0
--@inline compact session=SESSION
if compacted == 1 and values[1] then redis.call('DEL', LIVE) end
return compacted
