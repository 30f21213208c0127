--@include session
-- page: how the read-only listings page through the runnable set. A page
-- goes on after the member the previous page listed last, at the score it
-- had then, so members that leave the set or move between two pages never
-- make a later page skip or repeat the others. (A member that moves may
-- itself be listed twice, or not at all.)

-- Whether a sorts before b in byte order, as a sorted set orders members
-- of one score (Lua's `<` follows the server's locale).
local function bytes_before(a, b)
  local n, i = math.min(string.len(a), string.len(b)), 1
  while i + 255 <= n and string.sub(a, i, i + 255) == string.sub(b, i, i + 255) do i = i + 256 end
  while i <= n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
    i = i + 1
  end
  return string.len(a) < string.len(b)
end

-- Up to `limit` members of the runnable set with their scores (flat:
-- member, score, ...) in score order — descending when `reverse` —
-- running to the end of the set (+inf, or -inf when reversed): after
-- `member` at `score`, or, with member '', from the bound `from` (a
-- ZRANGEBYSCORE bound such as '-inf' or '(0').
local function ready_page(score, member, limit, reverse, from)
  if member == '' then
    if reverse then
      return redis.call('ZREVRANGEBYSCORE', READY, from, '-inf', 'WITHSCORES', 'LIMIT', '0', int(limit))
    end
    return redis.call('ZRANGEBYSCORE', READY, from, '+inf', 'WITHSCORES', 'LIMIT', '0', int(limit))
  end
  local range = reverse and 'ZREVRANGE' or 'ZRANGE'
  local rank
  local now = redis.call('ZSCORE', READY, member)
  if now and tonumber(now) == tonumber(score) then
    rank = redis.call(reverse and 'ZREVRANK' or 'ZRANK', READY, member) + 1
  else
    -- The member left its score: find where it would stand among the
    -- members that share that score (in byte order, reversed when
    -- `reverse`), by bisection over their ranks.
    local lo
    if reverse then
      lo = redis.call('ZCOUNT', READY, '(' .. score, '+inf')
    else
      lo = redis.call('ZCOUNT', READY, '-inf', '(' .. score)
    end
    local hi = lo + redis.call('ZCOUNT', READY, score, score)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local at = redis.call(range, READY, int(mid), int(mid))[1]
      local after
      if reverse then after = bytes_before(at, member) else after = bytes_before(member, at) end
      if after then hi = mid else lo = mid + 1 end
    end
    rank = lo
  end
  return redis.call(range, READY, int(rank), int(rank + limit - 1), 'WITHSCORES')
end
