--@include util
-- ready_sync: tells the ready index again what a session has: its listed
-- state, recomputed from the runnable set, under a new version (so the
-- shard applies it whatever it holds). A claim from the index runs it when
-- a session the index listed as due gave it nothing.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
--
-- Reply: { mark } with mark READY_MARK .. "<version>:<ready at>:<due>"
-- (see util's ready_mark).
local session = string.sub(KEYS[1], 1, -6)
local result = ready_mark(session, tonumber(ARGV[1]), false)
if result ~= READY_MARK then return { result } end
-- Unchanged: bump the version of the state as listed.
local key = session .. 'listed'
local v, text, free = string.match(redis.call('GET', key) or '0::0', '^(%d+):(%d*):?(%d?)$')
local version = int(tonumber(v) + 1)
redis.call('SET', key, version .. ':' .. text .. ':' .. free)
-- Not due: announcing a session that just gave a worker nothing would only
-- send the workers back to it.
return { READY_MARK .. version .. ':' .. text .. ':0' }
