--@include cursor
-- batch: the parts of an append shared by the scripts that add a caller's
-- batch (ARGV layout of append: now, n, served, origin, then five per event:
-- id, type, payload, cause, targets; after the events, an optional trace
-- context every entry of the batch stores as its 'trace' field).

local BATCH_FIELDS = 5

-- The i-th event's argument at `field` (1 id, 2 type, 3 payload, 4 cause,
-- 5 targets).
local function event_arg(i, field) return ARGV[4 + (i - 1) * BATCH_FIELDS + field] end

-- Reads the bounds and the owners of the batch's ids. Returns a reply when
-- the batch must not be written — { 'empty' }, { 'dup', ... } when every id
-- is stored (the stored entries, in request order), { 'partial', count },
-- { 'cleared', origin } — else nil.
local function screen_batch(n)
  local ids = {}
  for i = 1, n do ids[i] = event_arg(i, 1) end
  local owners = read_bounds(ids)
  if n == 0 then return { 'empty', has_pending() } end
  local found = 0
  for i = 1, n do
    if owners[i] then found = found + 1 end
  end
  if found == n then
    local reply = { 'dup', has_pending() }
    for i = 1, n do
      local at = owners[i] .. '-0'
      reply[#reply + 1] = redis.call('XRANGE', LOG, at, at)[1]
    end
    return reply
  end
  if found > 0 then return { 'partial', int(found) } end
  local origin = ARGV[4]
  if origin ~= '' and tonumber(origin) <= boundary then return { 'cleared', origin } end
  return nil
end

-- The batch as cursor work sees it: index, type and targets per event.
local function batch_of(n, base)
  local batch = {}
  for i = 1, n do
    local targets = targets_of(event_arg(i, 5))
    batch[i] = { idx = base + i, type = event_arg(i, 2), targets = targets, not_before = targets[1] and targets[1][3] }
  end
  return batch
end

-- Adds the batch's entries after `base` and buffers its id keys and counter.
-- A scheduled event's entry also stores its 'not_before' time.
local function add_batch(now, n, base, batch)
  local trace = ARGV[4 + n * BATCH_FIELDS + 1] or ''
  for i = 1, n do
    local idx = int(base + i)
    local not_before = batch[i].not_before
    if not_before then
      redis.call('XADD', LOG, idx .. '-0',
        'id', event_arg(i, 1), 'type', event_arg(i, 2), 'payload', event_arg(i, 3),
        'created_at', now, 'cause', event_arg(i, 4), 'not_before', int(not_before), 'trace', trace)
    elseif trace == '' then
      redis.call('XADD', LOG, idx .. '-0',
        'id', event_arg(i, 1), 'type', event_arg(i, 2), 'payload', event_arg(i, 3),
        'created_at', now, 'cause', event_arg(i, 4))
    else
      redis.call('XADD', LOG, idx .. '-0',
        'id', event_arg(i, 1), 'type', event_arg(i, 2), 'payload', event_arg(i, 3),
        'created_at', now, 'cause', event_arg(i, 4), 'trace', trace)
    end
    mark(id_key(event_arg(i, 1)), idx)
  end
  mark(COUNTER, int(base + n))
end
