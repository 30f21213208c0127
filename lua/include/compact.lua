-- compact: the rebuild of a small settled session to its size, pasted by
-- the scripts that do it (--@inline compact): compact_log, which the store
-- runs after a write left a session without work, and complete_fast, which
-- does it itself when its completion settles the session. No script
-- includes this file.

--@block compact
-- compacted: 1 when the settled session's log `log` (the session's head
-- `head`) and the head chunks of its indexes were rebuilt to their size
-- (DUMP + RESTORE, REPLACE, no expiry: the same entries, last id and
-- entries added; a pinned chunk without its pin field, CHUNK_PIN, which
-- keeps live chunks hashtables: a settled chunk is a sixth as big as a
-- listpack; an unpinned one is small already); 2 when the log is past the bounds (max_entries entries,
-- max_bytes bytes of MEMORY USAGE: it only grows until a reclaim); 0 when
-- it is left as it is (no log, or a server that cannot tell a key's size
-- or DUMP a stream: miniredis). Reads by compact_read (redis.call, or
-- redis.pcall where a key of another type must fail nothing); every read
-- comes before the first write.
local n = compact_read('XLEN', log)
if type(n) ~= 'number' or n == 0 then
  compacted = 0
elseif n > max_entries then
  compacted = 2
else
  local size = redis.pcall('MEMORY', 'USAGE', log)
  local payload = type(size) == 'number' and size <= max_bytes and redis.pcall('DUMP', log)
  if type(size) == 'number' and size > max_bytes then
    compacted = 2
  elseif type(payload) ~= 'string' then
    compacted = 0
  else
    -- The log is dense from its first entry to the session's head: with
    -- at most max_entries entries its rows lie in one or two chunks. A
    -- session below CHUNK_PIN_FROM events pinned none: nothing to read.
    local chunks = {}
    local low = head + 1
    if head >= CHUNK_PIN_FROM then
      local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
      low = tonumber(string.match(first[1][1], '^(%d+)'))
    end
    if head >= low then
      for c = math.floor((low - 1) / CHUNK), math.floor((head - 1) / CHUNK) do
        local key = session .. KEY_HEADS .. string.format('%d', c)
        -- An unpinned chunk (a session below CHUNK_PIN_FROM events) is a
        -- listpack already, or a hashtable by its own size: left as it is.
        if compact_read('HEXISTS', key, CHUNK_PIN) == 1 then
          local fields = redis.call('HLEN', key)
          if fields <= max_fields and redis.call('MEMORY', 'USAGE', key) <= max_bytes then
            chunks[#chunks + 1] = key
          end
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
    redis.call('RESTORE', log, 0, payload, 'REPLACE')
    compacted = 1
  end
end
--@end
