--@include layout
-- append_one: the commonest append, on its own: one batch of one event
-- with no cause and no targets, while no served consumer declares a log.
-- append_plain's semantics for that batch (idempotent by event id, the
-- clear fence on its origin, the type index of a typed log), in fewer
-- steps: on Redis 7.0 every value that crosses between Lua and Redis, every
-- string a script builds and an array reply each cost thousands of server
-- instructions, so this script builds five strings, reads one MGET, and
-- replies a single integer when it appends.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  now, epoch milliseconds from the store's clock
-- ARGV[2]  the event id (a generated one included)
-- ARGV[3]  type
-- ARGV[4]  payload JSON
-- and, each optional (absent when it and those after it are empty; every
-- ARGV value costs the server about a thousand instructions):
-- ARGV[5]  origin index, or ''
-- ARGV[6]  served consumers: '' for all, else a JSON list of [name]
-- ARGV[7]  the first 24 digits of an explicit id of the generated shape
--          (32 lower-case hex digits), whose block is looked up too; else ''
--
-- Replies:
--   4 × index + 2 × followed + pending   appended at index (an integer)
--   { 'dup', bits, entry }               the id is stored: its entry
--   { 'cleared', bits }                  origin at or below the clear marker
-- where bits = 2 × followed + pending: pending is 1 when a served consumer
-- has a live head, followed 1 when a reader follows the session (its
-- `followed` key is set: the store publishes the wake-up only then).
--@inline flat_session
--@inline one_event_args
local origin, served, block = ARGV[5] or '', ARGV[6] or '', ARGV[7] or ''
local call = redis.call
local values
if block == '' then
  values = call('MGET', counter, session .. KEY_CLEAR, session .. KEY_TYPED, session .. KEY_LIVE, session .. KEY_FOLLOWED, owner_key)
else
  values = call('MGET', counter, session .. KEY_CLEAR, session .. KEY_TYPED, session .. KEY_LIVE, session .. KEY_FOLLOWED, owner_key,
    session .. KEY_ID_BLOCK .. block)
end
--@inline one_event_bounds
if values[4] and values[4] ~= '0' then
  if served == '' then
    bits = bits + 1
  else
    local entries, names, pending, ready = cjson.decode(served), {}, false, session .. KEY_RUNNABLE
    --@inline served_set served_set=names
    --@inline pending_scan served_set=names READY=ready
    if pending then bits = bits + 1 end
  end
end

-- The index that owns the id in this lifetime, if any: its id key, else
-- the block of its first 24 digits (include/session's block_of).
local owner, record = values[6], values[7]
--@inline one_event_screen
--@inline one_event_xadd
if entry then
  -- A type some log cursor reads: the event joins that type's index.
  --@inline type_key SESSION=session name=typ
  call('ZADD', key, index, text)
  entry[2] = index
  call('MSET', owner_key, text, counter, text, session .. KEY_TYPED, cjson.encode(registry))
  return index * 4 + bits
end
call('MSET', owner_key, text, counter, text)
return index * 4 + bits
