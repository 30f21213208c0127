--@include sweep
-- reclaim: deletes one page of a past lifetime — log entries below the clear
-- marker and the id keys and id blocks that still name them (an id reused in
-- the new lifetime keeps its new owner) — and, once none is left, sweeps
-- what the past lifetimes left (see sweep), a bounded amount per call. Safe
-- to run repeatedly and concurrently: each run takes the next page or goes
-- on with the sweep, and a finished session does nothing.
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  page size (entries per run)
--
-- Replies: { deleted, done } — entries this run removed, and 1 once nothing
-- of a past lifetime remains, 0 while log entries of one do, 's' while the
-- sweep is under way (run again to go on with it); a third value, the
-- removed ready record's version, when this run collapsed the session (the
-- store then tells its ready shard to forget it).
read_bounds()
if boundary == 0 then return { 0, 1 } end
local phase, cursor = sweep_state()
local page = tonumber(ARGV[1])
local entries = redis.call('XRANGE', LOG, '-', int(boundary - 1) .. '-0', 'COUNT', page)
local removed = 0
if #entries > 0 then
  local stale, stream_ids = removed_id_records(entries, #entries, boundary - 1)
  sliced('DEL', nil, stale)
  removed = sliced_sum('XDEL', LOG, stream_ids)
  if #entries == page then
    if not phase then sweep_due() end
    return { removed, 0 }
  end
elseif not phase then
  -- Nothing below the marker and no sweep due: swept already.
  return { 0, 1 }
end
local done = sweep_run(phase or 'r', cursor or '0')
if done and collapsed_version then return { removed, 1, collapsed_version } end
return { removed, done and 1 or 's' }
