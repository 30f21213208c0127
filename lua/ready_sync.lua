--@include util
-- ready_sync: tells the ready index again what a session has: its listed
-- state, recomputed from the runnable set, under a new version (so the
-- shard applies it whatever it holds). A claim from the index runs it when
-- a session the index listed as due gave it nothing, and a write whose
-- reply was lost; the session's dead-letter state goes as listed (so this
-- path costs what it did before the dead index). A repair of the dead
-- index runs it with ARGV[2] '1': the dead letters are recounted too, and
-- their state stated even when there is none (':0'), so a shard that
-- lists them stale drops them.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds
-- ARGV[2]  '1' to recount and state the dead letters, else ''
--
-- Reply: { mark } with mark READY_MARK .. "<version>:<ready at>:<due>" and
-- ":<dead state>" when there is one to send (see util's ready_mark). Due
-- is set only when the ready time changed: announcing a session that just
-- gave a worker nothing would only send the workers back to it.
local session = string.sub(KEYS[1], 1, COUNT_CUT)
local now = tonumber(ARGV[1])
if ARGV[2] == '1' then
  dead_explicit = true
  return { ready_mark(session, now, false, nil, nil, nil, nil, nil, true) }
end
local result = ready_mark(session, now, false)
if result ~= READY_MARK then return { result } end
-- Unchanged: bump the version of the state as listed.
local key = session .. KEY_LISTED
local listed = redis.call('GET', key)
local v, text, free, dead = string.match(listed or '0::0', '^(%d+):(%d*):?(%d?):?(.*)$')
-- A session without a record counts from the clock (util's fresh_version).
local version = int((listed and tonumber(v) or fresh_version(now)) + 1)
local tail = (dead and dead ~= '') and (':' .. dead) or ''
redis.call('SET', key, version .. ':' .. text .. ':' .. free .. tail)
return { READY_MARK .. version .. ':' .. text .. ':0' .. tail }
