-- consumers_put: replaces the prefix's consumer registry (keys.Consumers)
-- when it is still at the version the caller read (compare and set), so two
-- processes that add or remove consumers at once cannot lose each other's
-- change: the loser reads again and retries. Everything that can fail (the
-- stored record's decoding) happens before the one write.
--
-- KEYS[1]  the registry record (<prefix>:{c}:consumers), a string:
--          {"v": version, "consumers": [...], "paused": [...]}
-- KEYS[2]  the registry's sentinel, never written (keys.ConsumersSentinel)
-- ARGV[1]  the version the caller read ('0': no record)
-- ARGV[2]  the new consumers, a JSON list
-- ARGV[3]  the names of the paused consumers, a JSON list
--
-- Replies: { 'ok', new version } or { 'conflict', stored version }.
local stored = redis.call('GET', KEYS[1])
local version = 0
if stored then version = tonumber(cjson.decode(stored).v) or 0 end
if version ~= tonumber(ARGV[1]) then return { 'conflict', version } end
redis.call('SET', KEYS[1], '{"v":' .. (version + 1) .. ',"consumers":' .. ARGV[2] .. ',"paused":' .. ARGV[3] .. '}')
return { 'ok', version + 1 }
