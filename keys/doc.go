// Package keys names every Redis key and pub/sub channel of the per-session
// event log. It is the only place in the module that formats a key name; the
// functions are pure and touch no Redis connection.
//
// # Layout "a2redis-1"
//
// Every key of a session has the form
//
//	<prefix>:{<tag>}:<name>
//
// where <tag> is [Tag] of the session id: the id quoted as a JSON string
// literal, double quotes included. The braces make <tag> the Redis Cluster
// hash tag, so all keys and channels of one session live in one slot and can
// be used together in a single script or transaction.
//
// The one global key is [Schema]: <prefix>:schema, a string holding the
// layout name ([Layout]) that the prefix was written with.
//
// Keys of one session (<name> after the common [Session.Base]):
//
//	name                 Redis type  holds
//	count                string      head index of the session (absent once a
//	                                 lifetime collapsed: read clear)
//	clear                string      index of the latest clear marker
//	log                  stream      the events; entry id <index>-0, fields
//	                                 id type payload created_at cause (JSON;
//	                                 absent or empty for an uncaused event)
//	id:<event id>        string      index of the event with that id in the
//	                                 current lifetime (deduplication)
//	ids:<nonce>          string      "<first index>:<count>" of a batch of two
//	                                 or more whose ids the store generated:
//	                                 <nonce> (24 hex digits) + position (8 hex
//	                                 digits); such ids have no id: key of their
//	                                 own (a generated batch of one has its id:
//	                                 key instead)
//	heads:<chunk>        hash        head-row columns of the indexes of one chunk
//	                                 (index i in chunk (i-1)/1000; fields
//	                                 "<index>:<row>:<column>", see internal/rows)
//	cursors              hash        lane and log cursor records, fields keyed by
//	                                 cursor id ("<len>:<consumer>L<lane>" or
//	                                 "...G<lane>", see internal/rows)
//	runnable             zset        every cursor with a head, score = head index
//	                                 while free to claim; HeldOffset + when the
//	                                 claim lapses or the retry hold ends while
//	                                 held; -index while dead-lettered
//	floor                string      the highest index trimmed: the retained
//	                                 log starts after it (only in a session
//	                                 that was trimmed)
//	skip                 string      JSON {consumer: score}: scan marks, no
//	                                 free head of the consumer scores below
//	                                 its mark (only in sessions a claim serving
//	                                 some consumers walked far)
//	live                 string      number of live (not dead-lettered) heads
//	flight               hash        consumer → heads in flight (claimed,
//	                                 unfinished); exists only while some are
//	typed                string      JSON {type: [from, last]} of the types log
//	                                 cursors read (the lazily built type indexes)
//	type:<hex of type>   zset        indexes of the events of one type
//	pins                 hash        per snapshot ref, how many heads pin it
//	snap:<reducer>       string      the reducer's head snapshot
//	snap-history:<red.>  zset        pinned older snapshots, score = index
//	snap-reducers        set         reducer names that have a snapshot
//	presence             hash        presence entries
//	sweep                string      "<clear index>:<phase>:<cursor>": how far
//	                                 the sweep of a past lifetime got (only
//	                                 while one is due or under way)
//	sweep-drop           set         reducers a sweep left empty, on their way
//	                                 out of snap-reducers (only during a sweep)
//	sentinel             (never)     never written; declared by every script so
//	                                 Redis refuses scripts while the slot
//	                                 migrates (see Session.Sentinel)
//	followed             string      set (with an expiry) while a reader follows
//	                                 the notify channel; plain appends publish
//	                                 their wake-ups only while it exists
//
// Channels of one session (pub/sub channel names, not keys; they carry the
// session's hash tag so that sharded pub/sub routes them to the session's
// slot):
//
//	notify               new events / wake-ups of the session
//	presence-events      presence changes of the session
//
// Keys of the worker registry (hash tag {w}, one slot for the prefix; see
// [Worker] and [Workers]):
//
//	<prefix>:{w}:worker:<id>  string  a running worker's JSON record, with
//	                                  an expiry (its heartbeat TTL)
//	<prefix>:{w}:workers      zset    member the worker id, score the epoch-ms
//	                                  time its record expires (listing without
//	                                  SCAN; expired members pruned in bounded
//	                                  steps)
//
// The consumer registry (hash tag {c}, one slot for the prefix; see
// [Consumers]) and the consumers' rate limiters (hash tag {q}; see [Rate]):
//
//	<prefix>:{c}:consumers       string  {"v": version, "consumers": [...],
//	                                     "paused": [...]}, replaced by compare
//	                                     and set
//	<prefix>:{q}:rate:<name>     string  '<window number> <starts taken>',
//	                                     expiring with its window
//
// Keys of the schedule listing (hash tag {s}, one slot for the prefix; see
// [Schedules]):
//
//	<prefix>:{s}:schedules       hash  field a schedule's name, value its
//	                                   JSON record (spec, session, type, by,
//	                                   seen)
//	<prefix>:{s}:schedule-next   zset  member the name, score its next tick
//	<prefix>:{s}:schedule-ticks  zset  member the name, score its newest
//	                                   stored tick
//
// # Why no caller string can spell another key
//
// Callers choose session ids, event ids, event types, reducer names,
// consumer names and lanes. None of them can make one key name equal another
// key name, nor move a key into another session's slot:
//
//   - The prefix may not contain '{' or '}' ([ValidatePrefix]), so the first
//     '{' of every session key is the one that opens the tag.
//   - Session ids are JSON-quoted by [Tag]: '"' and '\' are escaped, control
//     bytes, '{', '}' and bytes that are not part of valid UTF-8 become
//     \u00XX. The quoting is injective and its result never contains '{' or
//     '}', so the hash tag of a session key is exactly Tag(session) and two
//     different sessions never share a tag.
//   - After the tag, the fixed names are prefix-free among themselves; an
//     event id appears only as the last segment after "id:", a nonce only
//     after "ids:", a reducer only
//     as the last segment after "snap:" or "snap-history:", and a chunk is a
//     decimal number after "heads:". Event types are hex-encoded after
//     "type:", so they consist of [0-9a-f] only.
//   - Consumer names and lanes never appear in key names at all. They live
//     inside hash fields and zset members, length-prefixed
//     ("<byte length>:<consumer>...") so that a consumer name cannot run into
//     the tag that follows it.
package keys
