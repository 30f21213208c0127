// Command a2redis-inspect is the operator CLI of a2redis: it looks into the
// per-session event logs, cursors, dead letters and presence a2redis keeps in
// Redis (Redis 7+, Valkey, Upstash, Redis Cluster). It is light on the
// server (everything is read page by page, each page a short call of its
// own, so even a session of millions of heads never stalls production),
// safe (every command but redrive, cancel, drop, pause, resume and
// repair-session only reads, and redrive, cancel, drop and repair-session ask first;
// serve only reads unless started with --allow-writes;
// tail -f sets only the session's expiring 'followed' mark, which makes
// appends publish their wake-ups) and
// scriptable (--json, exit codes).
//
// # Usage
//
//	a2redis-inspect [global flags] COMMAND [flags] [ARGS]
//
// Flags may come before or after the command and its arguments; after a
// bare "--" everything is an argument (for a session id starting with '-').
// "a2redis-inspect help" (or -h) lists the commands; "a2redis-inspect help
// COMMAND" (or COMMAND -h) shows one command's flags, columns and JSON
// fields.
//
// # Commands
//
//	info                            layout of the prefix, key-locking support, server kinds and versions, cluster or not
//	sessions                        sessions under the prefix (sorted) with head, clear marker, runnable and dead heads
//	log SESSION                     a session's events in index order
//	tail SESSION                    the newest events; -f follows new ones live (causes included) until Ctrl-C, waiting for a session not there yet
//	cursors SESSION                 every consumer's cursor: position, head, LAG, STATE, claim, failures
//	dead SESSION                    dead-lettered heads with their last error
//	redrive SESSION CONSUMER INDEX  --retry or --skip a dead-lettered head (writes, asks first)
//	redrive SESSION --all           --retry or --skip every dead-lettered head (--consumer, --lane filter)
//	cancel SESSION CONSUMER INDEX   skip a head that has not completed, without running it (writes)
//	head SESSION CONSUMER INDEX     one head: its state while its cursor stands on it, else completed (by which attempt), skipped or cancelled
//	repair-session SESSION          mend a session an older release wedged: remove the log entries above its counter (writes, asks first)
//	presence SESSION                live presence fields
//	workers                         live worker processes: host, pid, heartbeat, consumers, in flight, held heads
//	consumers [list]                the prefix's consumer registry: name, kind, lane, types, start
//	consumers add|remove NAME       register (--log-lane L --types T,U --backfill) or remove a consumer (writes)
//	consumers backfill NAME         start a typed log consumer's cursor in every session, SCAN page by page (writes)
//	pause NAME / resume NAME        pause a consumer prefix-wide (claims skip it, its heads wait) / resume it and wake the workers (writes)
//	schedules                       periodic producers (package schedule): spec, session, next and newest tick
//	rates [CONSUMER]                rate limits at work: each consumer's running window, its starts and when it ends
//	ready                           sessions with work (the ready index) per shard, and since when; --stats per shard
//	serve                           the web dashboard (see Dashboard)
//
// Command flags:
//
//	sessions  --limit N (stop the scan at N sessions), --match GLOB (Redis
//	          glob on the whole session id)
//	log       --after N, --through N, --limit N, --type T (repeatable), --raw
//	tail      -n N (default 20), -f, --raw, --sharded (follow with SSUBSCRIBE)
//	redrive   --retry | --skip, --yes/-y (no confirmation), --lane L (which
//	          cursor, when the consumer has several dead at INDEX; '' is its
//	          event cursor); --all (every dead letter of SESSION, counted
//	          and confirmed first, then one Redrive call each, page by
//	          page), with --consumer C and --lane L as filters
//	cancel    --yes/-y (no confirmation), --lane L (which cursor, when the
//	          consumer has several heads at INDEX; '' is its event cursor)
//	head      --lane L (the consumer's lane cursor)
//	repair-session
//	          --yes/-y (no confirmation)
//	ready     --stats (one row per shard: due, held, oldest, next),
//	          --shard N, --limit N
//
// # Connection
//
//	--url URL      redis://[user:password@]host:port[/db], or rediss://… for
//	               TLS; ?skip_verify=true skips certificate verification. A
//	               bare host:port means redis://host:port. Repeat --url (or
//	               give a comma-separated list) to name the seeds of a Redis
//	               Cluster; a single URL also finds a cluster by itself.
//	               Default: $A2REDIS_URL, else redis://127.0.0.1:6379.
//	--prefix P     the store's key prefix. Default: $A2REDIS_PREFIX, else a2.
//	--timeout D    bound on every Redis call (connecting included), default
//	               10s. Long listings make many calls, each bounded alone.
//	--json         JSON instead of a table: NDJSON for lists, one object
//	               for single results (see Output).
//
// A wrong password, an unreachable server, a TLS mismatch, a prefix holding
// another key layout, and an unknown session each end with one actionable
// line on stderr and exit code 1. A prefix with no a2redis data is an
// unknown session for the commands that name one (exit 1); the prefix-wide
// commands answer instead, with exit code 0: info shows "layout none" and
// sessions an empty list (with the hint on stderr), since "nothing here" is
// what they were asked. Every command reads the prefix's layout with a GET
// of <prefix>:schema first and never creates it: the tool writes nothing
// unless asked to redrive.
//
// # Output
//
// Tables are aligned for people; caller data in cells is escaped Go-style
// (\n, \x1b …) so it can neither break a row nor drive the terminal, and an
// empty cell prints as "-". Hints (what to run next) go to stderr, never in
// JSON mode. Times are RFC 3339 in UTC with milliseconds
// (2026-01-02T15:04:05.000Z).
//
// With --json, a command that lists things prints NDJSON (JSON Lines): one
// compact JSON object per line and nothing else, no enclosing document, so
// output of any size streams and every line parses on its own (jq, or
// line-by-line readers); an empty list prints nothing. A single result is
// one JSON object. tail -f prints the same lines as tail, live. Field names
// are snake_case and stable; every field is always present; times are RFC
// 3339 UTC strings, or null when unset; a lane is "" for an event cursor;
// payloads and presence values are embedded as JSON. Each line of a
// session's list names its session.
//
// One object per line (NDJSON):
//
//	sessions  {"session", "head", "clear_index", "runnable",
//	           "dead_lettered"} (when --limit cut the scan, stderr says so)
//	log, tail {"index", "id", "type", "created_at", "cause" (null or
//	           {"consumer", "lane", "index", "attempt"}), "payload",
//	           "not_before" (a scheduled event only)}
//	cursors   {"session", "consumer", "kind" ("event", "lane", "log"),
//	           "lane", "position", "head" (0: none), "lag", "state",
//	           "attempts", "failures", "holder", "first_claimed_at",
//	           "last_claimed_at", "claim_expires_at", "last_failed_at",
//	           "last_error", "dead_lettered", "dead_lettered_at"}
//	dead      {"session", "consumer", "kind", "lane", "index", "event_id",
//	           "type", "created_at", "attempts", "failures", "holder",
//	           "last_failed_at", "last_error", "dead_lettered_at", "payload"}
//	presence  {"session", "participant", "field", "value", "seen", "at",
//	           "expires_at"}
//	workers   {"id", "host", "pid", "started_at", "heartbeat_at",
//	           "expires_at", "consumers", "concurrency", "in_flight", "held"
//	           (heads held), "heads": [{"session", "consumer", "lane",
//	           "index"}] (up to 100)}
//	consumers {"name", "kind" ("events", "log"), "lane", "types", "backfill",
//	           "paused"}
//	consumers backfill
//	          {"session", "head"} per session with work, then {"sessions",
//	          "with_work"}
//	schedules {"name", "spec", "session", "type", "next", "last", "by",
//	           "seen"}
//	rates     {"consumer", "starts", "ends_in_ms"}
//	ready     {"shard", "session", "state" ("due", "held"), "at"};
//	          with --stats {"shard", "due", "held", "oldest", "next"}
//	redrive --all
//	          one redrive object (below) per head acted on
//
// One object:
//
//	info      {"prefix", "layout" (null: no data), "layout_supported",
//	           "key_locking" ("yes", "no", "unknown"), "key_locking_detail",
//	           "mode" ("standalone", "cluster"),
//	           "nodes": [{"addr", "server", "version", "role", "error"}]}
//	redrive   {"session", "consumer", "lane", "index", "action" ("retry",
//	           "skip"), "redriven", "has_pending"}
//	cancel    {"session", "consumer", "lane", "index", "outcome"
//	           ("cancelled", "dead-lettered", "not-found"), "attempts",
//	           "has_pending"}
//	head      {"session", "consumer", "lane", "index", "state" (a cursor
//	           state, "completed", "skipped", "cancelled", "not-reached"),
//	           "attempt", "at"}
//	repair-session
//	          {"session", "head", "removed" (the indexes removed), "copied"}
//
// A cursor's state is one of idle (no head: caught up), ready (waiting for a
// worker), claimed (a worker holds an unexpired claim), orphaned (an
// unexpired claim of a worker whose heartbeat stopped: its record left the
// worker registry, nothing runs the head, and the next claim takes it over
// once claim_expires_at passes), lapsed (the claim expired unreported; the
// next claim takes it over and counts a failure),
// retry-wait (a failure holds it back until claim_expires_at) and dead
// (dead-lettered: stuck until redriven). lag is how far behind a cursor is:
// the events appended since its head (session head - head + 1), 0 for a
// cursor with no head (caught up) whatever its kind. cursors are sorted by
// consumer, lane (event cursors last) and head; dead letters by index, then
// consumer; sessions and workers by id; ready sessions by shard, then
// time.
//
// # Workers
//
// Every running worker.Worker registers itself under the prefix (a record
// with an expiry, rewritten every HeartbeatTTL/3, default TTL 15 s) and
// removes it when it stops; workers lists the live ones from the
// registry's listing (no SCAN). A worker that died without stopping
// disappears once its TTL passes. HEARTBEAT is the age of its last
// heartbeat; HELD counts the heads it holds and HEADS names the first few
// (JSON: up to 100).
//
// # Dashboard
//
// serve serves a web dashboard on --addr (default 127.0.0.1:8080), rendered
// on the server with html/template, its CSS and JS embedded in the binary
// (no CDN; works offline):
//
//	/                      overview per consumer: due, in flight, held,
//	                       dead, completed and failed per minute, oldest due
//	                       age; charts of throughput, failures and backlog
//	                       over the last hour, sampled every 10 s by the
//	                       serving process (/stats.json); workers alive;
//	                       refreshes every 10 s
//	/dead                  dead letters across sessions, filtered by
//	                       consumer and error text (≤ 100 a page); with
//	                       --allow-writes, Retry all / Skip all of the filter
//	                       (confirmed; batches of ≤ 100 with a progress page,
//	                       /dead/job, resumable after an error)
//	/shards                the ready index per shard (due, held, oldest ready
//	                       age), sessions with work, sessions with dead
//	                       letters among the first scan page, lag per
//	                       consumer
//	/sessions?q=PREFIX     sessions whose id starts with PREFIX (SCAN, never
//	                       KEYS; ≤ 100 a page, "more…" resumes the scan)
//	/session?id=SESSION    cursors, dead letters (Retry / Skip, single or
//	                       bulk, each confirmed on a page of its own),
//	                       presence, a live tail (server-sent events from
//	                       /session/tail, through the wake-up feed, as tail
//	                       -f), the log (50 events a page, payloads
//	                       pretty-printed, causes linked to their head)
//	/workers               live workers, what they hold, heartbeat age
//
// Flags: --addr HOST:PORT, --allow-writes (enable redrive; the dashboard is
// read-only without it and refuses every POST with 403; like tail -f, an
// open live tail keeps only the session's expiring 'followed' mark set), --token T (every
// request must carry Authorization: Bearer T or the basic-auth password T;
// 401 otherwise). Binding an address other than loopback without --token
// is refused (exit 2). A write is a POST carrying the process's CSRF token
// in a hidden field, refused (403) without it, or when Origin names another
// host or Sec-Fetch-Site is neither same-origin nor none. Every request does
// a bounded amount of Redis work whatever the data size: one store page
// call of at most 100 items per list (a cursor list reads on past the end
// of one kind of cursor, 4 calls at most), one bounded SCAN page (10 calls
// at most) for a search.
//
// # Exit codes
//
//	0  ok (tail -f ended with Ctrl-C included; info and sessions on a
//	   prefix with no data included)
//	1  error: Redis unreachable or timed out, wrong password, TLS problem,
//	   another key layout, unknown session (or no a2redis data under the
//	   prefix, for a command naming a session), nothing to redrive, redrive
//	   declined, interrupted
//	2  usage: unknown command or flag, wrong number of arguments, bad value
//
// # Examples
//
//	a2redis-inspect --url rediss://:secret@redis.internal:6380 info
//	a2redis-inspect sessions --match 'order-*' --limit 50
//	a2redis-inspect cursors order-42
//	a2redis-inspect dead order-42 --json | jq -r .last_error
//	a2redis-inspect log order-42 --after 1000 --type payment.failed --raw
//	a2redis-inspect tail -f order-42
//	a2redis-inspect redrive order-42 mailer 17 --retry
//	a2redis-inspect redrive order-42 --all --consumer mailer --retry --yes
//	a2redis-inspect workers
//	a2redis-inspect ready --stats
//	a2redis-inspect serve --allow-writes
//	a2redis-inspect serve --addr 0.0.0.0:8080 --token "$DASH_TOKEN"
package main
