-- flat: blocks only the flat scripts paste (--@inline); no script includes
-- this file, so nothing here is composed in place.

--@block fresh_claim
-- Appends to `fields` the columns of a first claim of the head row whose
-- fields start with `prefix`: attempt 1, its kind, claimed first and last
-- at `stamp`, by `holder` until `expires_at` (claim's fresh claim).
local w = #fields
fields[w + 1], fields[w + 2] = prefix .. COL_ATTEMPTS, '1'
fields[w + 3], fields[w + 4] = prefix .. COL_KIND, kind
fields[w + 5], fields[w + 6] = prefix .. COL_FIRST_CLAIMED, stamp
fields[w + 7], fields[w + 8] = prefix .. COL_LAST_CLAIMED, stamp
fields[w + 9], fields[w + 10] = prefix .. COL_HOLDER, holder
fields[w + 11], fields[w + 12] = prefix .. COL_EXPIRY, expires_at
--@end

--@block flat_session
-- counter and session: KEYS[1], the session's counter, and the session's
-- base, which every other key of the session extends.
local counter = KEYS[1]
local session = string.sub(counter, 1, COUNT_CUT)
--@end

--@block flat_bounds
-- boundary and total: the clear marker and the session head, from an MGET
-- of the counter and the clear marker (a collapsed session keeps only its
-- clear marker, '<index>:<created at>:<id>': the index is its leading
-- digits).
local boundary = tonumber(string.match(bounds[2] or '0', '^%d+'))
local total = tonumber(bounds[1]) or boundary
--@end

--@block claim_args
-- A claim's arguments (claim's ARGV): holder, now, expiry, and the
-- highest score it may claim (`through`, below HELD).
local holder, now, expires_at = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local through = ARGV[6] == '' and HELD - 1 or math.min(tonumber(ARGV[6]), HELD - 1)
--@end

--@block one_event_args
-- A lone event's append (append_one, append_targeted): its id, type and
-- the id's key.
local id, typ = ARGV[2], ARGV[3]
local owner_key = session .. KEY_ID .. id
--@end

--@block one_event_bounds
-- boundary: the clear marker; bits: 2 when the session is followed, from
-- an MGET of counter, clear, typed, live and followed first (tonumber only
-- on what is there: a missing key is false).
local boundary = values[2] and tonumber(string.match(values[2], '^%d+')) or 0
local bits = values[5] and 2 or 0
--@end

--@block one_event_screen
-- A lone event's append up to its XADD: owner (the index its id names,
-- from its id key or, failing that, its block's record `record`), the dup
-- and cleared replies, then index, text and the typed registry and the
-- event type's entry in it.
if not owner and record then
  local p = tonumber(string.sub(id, 25), 16)
  --@inline block_owner
end
if owner and tonumber(owner) >= boundary then
  local entry = string.format('%d-0', owner)
  return { 'dup', bits, call('XRANGE', session .. KEY_LOG, entry, entry)[1] }
end
if origin ~= '' and tonumber(origin) <= boundary then
  return { 'cleared', bits }
end
local index = (tonumber(values[1]) or boundary) + 1
local text = string.format('%d', index)
-- Everything that can fail is read and decoded before the first write.
local registry = values[3] and cjson.decode(values[3])
if values[3] then
  --@inline registry_check
end
local entry = registry and registry[typ]
--@end

--@block one_event_xadd
-- The lone event's entry. An uncaused event's entry has no cause field
-- (readers take a missing cause as none).
call('XADD', session .. KEY_LOG, text .. '-0', 'id', id, 'type', typ,
  'payload', ARGV[4], 'created_at', ARGV[1])
--@end

--@block lone_entry
-- entry: the stream entry at index `lone` (the one head a call claims
-- next, a strictly ordered worker's: it comes back with its event, which
-- spares the worker a second round trip; an entry through Lua costs the
-- server more than a native XRANGE, so not for several heads at once), or
-- false. Read before the call's first write. LOG is the session's log.
local entry = false
if lone then
  local id = lone .. '-0'
  local found = redis.call('XRANGE', LOG, id, id)
  if #found == 1 then entry = found[1] end
end
--@end

--@block flat_flight
-- flight: the session's heads in flight per consumer (keys.Session.Flight);
-- in_flight counts delta heads of consumer in or out, as session's does,
-- and flat_flight_send sends the changes.
local flight, flight_changes, flight_order = session .. KEY_FLIGHT, {}, {}
local function in_flight(consumer, delta)
  if not flight_changes[consumer] then
    flight_order[#flight_order + 1] = consumer
    flight_changes[consumer] = 0
  end
  flight_changes[consumer] = flight_changes[consumer] + delta
end
--@end

--@block flat_flight_send
for _, consumer in ipairs(flight_order) do
  --@inline flight_send FLIGHT=flight
end
--@end
