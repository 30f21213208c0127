--@readonly
--@include page
-- dead_letters: one page of a session's dead-lettered heads above the
-- clear marker (Store.DeadLettersPage), lowest index first: a
-- dead-lettered head scores minus its index in the runnable set. A page
-- lists at most `limit` heads, so no call holds the server long however
-- many there are. The events are not in the reply: the store reads them
-- with a plain XRANGE per run of indexes (an entry moved into Lua and back
-- out costs the server far more).
--
-- KEYS[1]  the session counter
-- KEYS[2]  the session's sentinel, never written (keys.Session.Sentinel)
-- ARGV[1]  limit: the most heads the page lists
-- ARGV[2]  the score the previous page's last member had ('' to start)
-- ARGV[3]  the previous page's last member ('' to start)
--
-- Reply: { next, head... } where next is {} after the last page, else
-- { score, member } (where the next page starts), and each head is
-- { consumer, tag, index, columns } with columns d fc lc ch ce a lf lfa e
-- f.
local limit = tonumber(ARGV[1])
local page = ready_page(ARGV[2], ARGV[3], limit, true, '(0')
local reply = { {} }
if #page == 2 * limit then reply[1] = { page[#page], page[#page - 1] } end
if #page == 0 then return reply end
read_clear()
local refs, items = {}, {}
for i = 1, #page, 2 do
  local consumer, tag = parse_cid(page[i])
  local idx = -tonumber(page[i + 1])
  if idx > boundary then
    refs[#refs + 1] = { idx, row_of(consumer, tag) }
    items[#items + 1] = { consumer, tag, idx }
  end
end
local rows = read_dispatch(refs)
for k, item in ipairs(items) do
  reply[#reply + 1] = { item[1], item[2], int(item[3]), rows[k] }
end
return reply
