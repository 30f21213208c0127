--@include batch
-- append_plain: append for a batch that carries no cursor work — no event
-- has targets or a cause, and no served consumer declares a log. It does
-- what append does for such a batch (same ARGV, same replies) without the
-- cursor machinery, so the common case runs a smaller script.
--
-- KEYS[1]  the session counter; every other key is derived from it.
-- ARGV     as append: now, n, served consumers, origin index or '', then per
--          event: id, type, payload JSON, '' (cause), '' (targets)
--
-- Replies: as append, except never 'superseded' or 'index':
--   { 'ok', first index, has_pending } | { 'empty', has_pending } |
--   { 'dup', has_pending, entry... } | { 'partial', count } | { 'cleared', origin }
local now, n = ARGV[1], tonumber(ARGV[2])
use_served(ARGV[3])
local refused = screen_batch(n)
if refused then return refused end
local base = total
add_batch(now, n, base)
-- Events of a type some log cursor reads still join its index.
if next(typed) ~= nil then index_batch(batch_of(n, base)) end
commit()
return { 'ok', int(base + 1), has_pending() }
