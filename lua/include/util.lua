--@include layout
-- util: helpers every script may use. No keys are touched here.
--
-- From layout: CLEAR_TYPE, the reserved event type of a clear marker; CHUNK,
-- how many consecutive indexes share one heads:<chunk> hash. HELD marks a
-- held head in the runnable set (keys.HeldOffset): its score is HELD + the
-- time its claim lapses or its retry hold ends, so the scores 1 … HELD-1 are
-- exactly the heads free to claim, and the held ones sort by when they free
-- up. Every write to a heads chunk of a session of CHUNK_PIN_FROM events
-- or more also sets its pin field, CHUNK_PIN (a name that is no row's), to
-- CHUNK_PIN_VALUE: a value longer than Redis's default
-- hash-max-listpack-value (64 bytes) keeps the hash in hashtable encoding.
-- A chunk holds hundreds of fields, and in a listpack every field read or
-- written is a scan of the whole hash. A smaller session's few rows stay a
-- small listpack, never pinned, and its settle rebuilds none of them.

-- The index of a clear marker from its key's value (keys.Session.Clear):
-- '<index>', or '<index>:<created at>:<id>' once the session collapsed to
-- it (the marker's entry is then no longer in the log); 0 for none.
local function clear_index(value)
  if not value then return 0 end
  return tonumber(string.match(value, '^%d+'))
end

-- Integers as decimal text. tostring() and `..` format numbers with %.14g on
-- Redis, which turns large integers into exponent notation.
local function int(n) return string.format('%d', n) end

-- Runs a variadic command in calls of at most SLICE arguments (unpack is
-- bounded by the Lua stack: ~8000 values on Redis, fewer on gopher-lua) and
-- concatenates table replies (a reply that is not a table gives {}). The
-- slice size is even, so field/value and score/member pairs stay together.
-- Nothing is sent for an empty list; a list that fits in one call is not
-- copied.
local function sliced(command, key, args)
  local n = #args
  if n <= SLICE then
    if n == 0 then return {} end
    local reply
    if key then
      reply = redis.call(command, key, unpack(args))
    else
      reply = redis.call(command, unpack(args))
    end
    return type(reply) == 'table' and reply or {}
  end
  local results = {}
  for first = 1, n, SLICE do
    local last = math.min(first + SLICE - 1, n)
    local reply
    if key then
      reply = redis.call(command, key, unpack(args, first, last))
    else
      reply = redis.call(command, unpack(args, first, last))
    end
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do results[#results + 1] = value end
    end
  end
  return results
end

-- sliced for a command with an integer reply (DEL, XDEL, ZREM, …): the sum
-- of the replies of its calls.
local function sliced_sum(command, key, args)
  local total = 0
  for first = 1, #args, SLICE do
    local last = math.min(first + SLICE - 1, #args)
    if key then
      total = total + redis.call(command, key, unpack(args, first, last))
    else
      total = total + redis.call(command, unpack(args, first, last))
    end
  end
  return total
end

-- The group of index idx's heads chunk in `groups` (by chunk number), made
-- and appended to `order` the first time: { key, members = {}, names = {} }.
-- The flat scripts gather their rows' fields per chunk with it.
local function chunk_group(session, groups, order, idx)
  local number = math.floor((idx - 1) / CHUNK)
  local group = groups[number]
  if not group then
    group = { key = session .. KEY_HEADS .. int(number), members = {}, names = {} }
    groups[number] = group
    order[#order + 1] = group
  end
  return group
end

-- The ready index (keys.Ready, one zset per shard, in other slots) lists
-- every session with work and the time it has work from. A script cannot
-- write it, so a write that changes a session's runnable set ends with
-- ready_mark, which keeps the session's own record of what it told the
-- index (the `listed` key: "<version>:<ready at>:<free>", ready at empty
-- for no work, free '1' when a head was free to claim) and returns
-- READY_MARK .. "<version>:<ready at>:<due>" when that changed (READY_MARK
-- alone when not); the store pops it off the reply and sends the update to
-- the session's shard. `due` is '1' when the session has work now and had
-- none before, or got a future time earlier than the one listed (or none):
-- the shard announces it on its work channel.
--
-- The session has work from: with a free head, the time it got work (kept
-- while it has free heads, so the oldest waiting sessions sort first) or
-- now when `bump` is set (a claim that leaves free heads moves the session
-- behind the others: round robin); else the earliest end of a claim or
-- retry hold (or an earlier end it had, not yet passed: see below); else
-- it has none.
--
-- `listed` is the listed key's value as the script read it (false: none;
-- nil: read it here). `keeps_free`: the write made no free head un-free
-- (every write but a claim and a clear); `added_free`: it made a head free.
-- `holds`: the earliest end of a hold the write set (false: it set none;
-- nil: not known); `live_after`: the session's live heads after the write
-- (nil: not known). With those, a session that had a free head, or got
-- one, or stays held, or has none left, needs no read of its runnable set.
-- The version a session without a listed record counts from: its write's
-- time (epoch ms, from the store's clock) × 1000. A record goes when its
-- session is dropped, and the shard forgets the session's version with it;
-- a version counted from the time is still above any the session's past
-- used (its state changes far less than 1000 times a millisecond), so
-- versions never go back without a record of them kept. (Scripts take the
-- time as an argument: a key-locking server refuses TIME.)
local function fresh_version(now) return now * 1000 end

-- The dead-letter state a session tells the dead index (keys.Ready.Dead
-- and DeadCounts): '' when it holds no dead-lettered head, else
-- "<count>,<since>,<complete>,<consumers>" (see keys.Session.Listed).
-- <since> is the time it has held dead letters from: `since_was` when it
-- held some before, else now. The consumers are those of the first
-- DEAD_SCAN dead-lettered heads (a dead head scores minus its index in the
-- runnable set), so the call is bounded whatever the session holds.
local function dead_state(session, now, since_was)
  local runnable = session .. KEY_RUNNABLE
  local n = redis.call('ZCOUNT', runnable, '-inf', '(0')
  if n == 0 then return '' end
  local seen, names = {}, {}
  local members = redis.call('ZRANGEBYSCORE', runnable, '-inf', '(0', 'LIMIT', '0', int(DEAD_SCAN))
  for _, cid in ipairs(members) do
    --@inline cid_consumer
    if not seen[consumer] then
      seen[consumer] = true
      names[#names + 1] = consumer
    end
  end
  table.sort(names)
  for i, name in ipairs(names) do names[i] = int(string.len(name)) .. ':' .. name end
  return int(n) .. ',' .. int(since_was or now) .. ',' .. (#members < n and '0' or '1') .. ',' .. table.concat(names)
end

-- Scan marks (keys.Session.Skip): a JSON object consumer → score, the
-- consumer having no free head scored below its mark. skip_lowered takes
-- the marks' text (false or nil for none) and `adds`, runnable-set changes
-- as ZADD takes them (score, member, ...), and lowers the mark of each
-- consumer that gets a free head below it to that head's index. Returns
-- the new text, or nil when no mark changed. Appends need not call it:
-- their heads are at a new index, above every mark.
-- Marks that do not decode count as none (a claim that walks writes new
-- ones): reading them never fails a script.
local function skip_marks(value)
  if not value then return nil end
  local ok, marks = pcall(cjson.decode, value)
  if ok and type(marks) == 'table' then return marks end
  return nil
end
local function skip_lowered(value, adds)
  local marks, changed = skip_marks(value), false
  if not marks then return nil end
  for i = 1, #adds, 2 do
    local score = tonumber(adds[i])
    if score > 0 and score < HELD then
      local cid = adds[i + 1]
      --@inline cid_consumer
      local floor = marks[consumer]
      if floor and score < floor then
        marks[consumer] = score
        changed = true
      end
    end
  end
  if changed then return cjson.encode(marks) end
  return nil
end

-- Set by ready_sync: its mark states the dead-letter state whatever it is
-- (':0' for none), so a shard that holds a stale entry drops it.
local dead_explicit = false

-- Where the session has work from after the write, as ready_mark's `at`
-- and `now_free`; nil when the write cannot have changed it (nothing to
-- read). The arguments are ready_mark's and what it parsed from listed.
local function ready_next(session, now, bump, was, free, keeps_free, added_free, holds, live_after)
  if live_after == 0 then
    -- No live head left: no work, nothing to read.
    return false, false
  elseif keeps_free and free then
    return nil
  elseif keeps_free and holds ~= nil and not added_free and not free and was and was > now and
         (live_after or 0) > 0 and (holds == false or holds >= was) then
    -- Held before and a head still live, none freed, no hold set earlier
    -- than the listed end: the earlier end stays listed (see below), so
    -- nothing to read.
    return nil
  elseif keeps_free and added_free then
    return (was and was <= now) and was or now, true
  end
  local first = redis.call('ZRANGEBYSCORE', session .. KEY_RUNNABLE, '(0', '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if #first > 0 then
    local score = tonumber(first[2])
    if score >= HELD then
      return score - HELD, false
    elseif bump or not was or was > now then
      return now, true
    end
    return was, true
  end
  return false, false
end

-- `dead`: true when the write may have changed the session's dead-lettered
-- heads (dead-lettered one, redrove one: dead_state recounts them);
-- 'gone' when it left none (a clear); nil or false when it changed none.
-- A change of the dead-letter state is a change of the listed record under
-- a new version, sent even when the ready time stays: the mark then ends
-- with ":<dead state>", or ":0" when the session's last dead letter went.
-- A session that holds dead letters sends its state with every update (so
-- the shard's newest applied update always has it right); one that holds
-- none sends nothing more, and the shard's dead index costs it nothing.
local function ready_mark(session, now, bump, listed, keeps_free, added_free, holds, live_after, dead)
  local key = session .. KEY_LISTED
  if listed == nil then listed = redis.call('GET', key) end
  local version, was, free, dead_was = nil, false, false, ''
  if listed then
    local v, a, f, d = string.match(listed, '^(%d+):(%d*):?(%d?):?(.*)$')
    version, was, free, dead_was = tonumber(v), tonumber(a) or false, f == '1', d or ''
  end
  local dead_now = dead_was
  if dead == true then
    local since_was = string.match(dead_was, '^%d+,(%d+),')
    dead_now = dead_state(session, now, since_was and tonumber(since_was))
  elseif dead == 'gone' then
    dead_now = ''
  end
  local dead_changed = dead_now ~= dead_was
  local at, now_free = ready_next(session, now, bump, was, free, keeps_free, added_free, holds, live_after)
  if at == nil then
    if not dead_changed and not dead_explicit then return READY_MARK end
    at, now_free = was, free
  end
  -- A held session whose earliest hold end moved later (a lease renewed,
  -- a lane's next head claimed with a new lease) keeps its earlier time:
  -- listing work early is safe (a claim then finds the session busy and
  -- lists it again from its true state), and a lane completed and claimed
  -- on in one call then costs no index update per event.
  if at and was and not now_free and not free and was > now and at > was then at = was end
  local moved = at ~= was or dead_changed
  if not moved and now_free == free and not dead_explicit then return READY_MARK end
  local text = at and int(at) or ''
  if not version then version = fresh_version(now) end
  if moved or dead_explicit then version = version + 1 end
  redis.call('SET', key, int(version) .. ':' .. text .. ':' .. (now_free and '1' or '0') ..
    (dead_now ~= '' and ':' .. dead_now or ''))
  if not moved and not dead_explicit then return READY_MARK end
  -- Announced: work claimable now that was not before, or a time earlier
  -- than any listed before (a scheduled head, a hold ending sooner): a
  -- worker that waits for the index's next time must learn of it.
  local due = at ~= was and at and ((at <= now and not (was and was <= now)) or (at > now and (not was or at < was)))
  local tail = ''
  if dead_now ~= '' then
    tail = ':' .. dead_now
  elseif dead_changed or dead_explicit then
    tail = ':0'
  end
  return READY_MARK .. int(version) .. ':' .. text .. ':' .. (due and '1' or '0') .. tail
end
