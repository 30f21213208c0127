--@include layout
-- rate_take: takes (or gives back) handler starts from a consumer's
-- prefix-wide rate limit, a fixed window of the server's clock: at most
-- `limit` starts per window of `window` ms. Everything that can fail (the
-- stored count's decoding, the arguments) happens before the one write.
--
-- KEYS[1]  the consumer's limiter (<prefix>:{q}:rate:<consumer>), a string
--          '<window number> <starts taken in it>' that expires with its
--          window
-- KEYS[2]  the limiters' sentinel, never written (keys.RateSentinel)
-- ARGV[1]  limit: starts per window
-- ARGV[2]  window length, ms
-- ARGV[3]  starts wanted (> 0), or starts given back (< 0: a claim took
--          fewer heads than it was granted)
-- ARGV[4]  for a give-back, the number of the window the starts were
--          taken from (a take's reply): starts of a window that has ended
--          are not given back (the current window never granted them)
--
-- Replies: { granted, ms until the window ends, the window's number };
-- granted is 0 when the window is used up (wait that long), and for a
-- give-back the starts given back.
local limit, window, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local from = tonumber(ARGV[4] or '')
if not limit or not window or not want or window < 1 or (want < 0 and not from) then
  return redis.error_reply('ERR rate_take: bad arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = math.floor(now / window)
local left = (current + 1) * window - now
local taken = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local w, n = string.match(stored, '^(%d+) (%d+)$')
  if w and tonumber(w) == current then taken = tonumber(n) end
end
if want < 0 and from ~= current then
  return { 0, left, current } -- its window ended: nothing to give back
end
local granted
if want >= 0 then
  granted = math.max(0, math.min(want, limit - taken))
  taken = taken + granted
else
  granted = math.min(-want, taken)
  taken = taken - granted
end
redis.call('SET', KEYS[1], current .. ' ' .. taken, 'PX', left + RATE_GRACE)
return { granted, left, current }
