package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
)

// scanCount is the COUNT hint of one SCAN call.
const scanCount = 1000

func sessionsCommand() command {
	return command{
		name:    "sessions",
		summary: "list the sessions under the prefix with head, clear marker, runnable and dead heads",
		details: `Scans every node (every master of a cluster) with SCAN, never KEYS, and
prints the sessions sorted by id (byte order), so it holds every id found
in memory first; --limit stops the scan at N sessions (the first N found,
sorted). A session exists while its log key exists.
Columns: SESSION, HEAD (index of the newest event), CLEAR (latest clear
marker, 0 if none), RUNNABLE (live heads: runnable or claimed) and DEAD
(dead-lettered heads; see 'dead SESSION').
A prefix with no a2redis data has no sessions: the list is empty and the
exit code 0, as info reports "layout none" with exit code 0; a prefix
holding another key layout exits 1.
--match takes a Redis glob (* ? [abc] [^a] [a-z] \x) matched against the
whole session id.
JSON: {"session","head","clear_index","runnable","dead_lettered"}, one
object per line (NDJSON; nothing for no sessions). When --limit stopped the
scan (more sessions may exist), stderr says so, in JSON mode too.`,
		need: needClient, // the layout is checked by sessions itself
		setup: func(fs *flag.FlagSet) runner {
			var o sessionsOptions
			fs.IntVar(&o.limit, "limit", 0, "list at most `N` sessions (0: all)")
			fs.StringVar(&o.match, "match", "", "list only sessions whose id matches `GLOB`")
			return runner{
				check: func([]string) error {
					if o.limit < 0 {
						return errors.New("--limit must not be negative")
					}
					if err := checkGlob(o.match); err != nil {
						return fmt.Errorf("--match %q: %v", o.match, err)
					}
					return nil
				},
				run: func(ctx context.Context, a *app, _ []string) error { return a.sessions(ctx, o) },
			}
		},
	}
}

type sessionsOptions struct {
	limit int
	match string
}

// sessionJSON is one row of sessions.
type sessionJSON struct {
	Session      string `json:"session"`
	Head         int64  `json:"head"`
	ClearIndex   int64  `json:"clear_index"`
	Runnable     int64  `json:"runnable"`
	DeadLettered int64  `json:"dead_lettered"`
}

var errEnough = errors.New("enough")

func (a *app) sessions(ctx context.Context, o sessionsOptions) error {
	// Every id first (SCAN may return a key twice), then sorted.
	found := map[string]bool{}
	var ids []string
	limited := false
	err := a.eachSessionPage(ctx, o.match, func(page []string) error {
		for _, id := range page {
			if found[id] {
				continue
			}
			if o.limit > 0 && len(ids) == o.limit {
				limited = true
				return errEnough
			}
			found[id] = true
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	sort.Strings(ids)

	var tbl *table
	layout, err := a.layout(ctx)
	if err != nil {
		return err
	}
	switch layout {
	case "":
		// Nothing under the prefix: no sessions, which is an answer, not
		// an error (info says "layout none" the same way).
		if a.opts.json {
			return nil
		}
		if _, err := fmt.Fprintf(a.out, "no sessions under prefix %q\n", a.opts.prefix); err != nil {
			return err
		}
		a.hint("(%s)", (&errNoData{prefix: a.opts.prefix}).Error())
		return nil
	case keys.Layout:
	default:
		return &a2redis.LayoutError{Prefix: a.opts.prefix, Found: layout, Want: keys.Layout}
	}
	if !a.opts.json {
		empty := fmt.Sprintf("no sessions under prefix %q", a.opts.prefix)
		if o.match != "" {
			empty = fmt.Sprintf("no sessions matching %q under prefix %q", o.match, a.opts.prefix)
		}
		tbl = newTable(a.out, empty, "SESSION", "HEAD", "CLEAR", "RUNNABLE", "DEAD")
	}
	// The stats a page at a time; JSON streams them, a table is printed
	// whole at the end so every column fits every row.
	for first := 0; first < len(ids); first += a.scanCount() {
		rows, err := a.sessionStats(ctx, ids[first:min(first+a.scanCount(), len(ids))])
		if err != nil {
			return err
		}
		for _, r := range rows {
			if tbl == nil {
				if err := writeLine(a.out, r); err != nil {
					return err
				}
			} else {
				tbl.row(r.Session, itoa(r.Head), itoa(r.ClearIndex), itoa(r.Runnable), itoa(r.DeadLettered))
			}
		}
		if tbl == nil {
			if err := a.out.Flush(); err != nil {
				return err
			}
		}
	}
	if tbl != nil {
		if err := tbl.close(); err != nil {
			return err
		}
	}
	if limited {
		fmt.Fprintf(a.env.Stderr, "(stopped at --limit %d: more sessions may exist)\n", o.limit)
	}
	return nil
}

// scanCount is the COUNT of one SCAN call and how many sessions one round
// of stats reads (Env.pageLimit in tests).
func (a *app) scanCount() int {
	if a.env.pageLimit > 0 {
		return a.env.pageLimit
	}
	return scanCount
}

// sessionStats reads each session's bounds and head counts: one pipelined
// round of MGETs, then one of ZCOUNTs on the runnable set above the clear
// marker (scores > 0 are live heads, < 0 dead-lettered ones; entries at or
// below the marker belong to a past lifetime that reclaim has not swept
// yet).
func (a *app) sessionStats(ctx context.Context, sessions []string) ([]sessionJSON, error) {
	if len(sessions) == 0 {
		return nil, nil
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	c := a.client
	cmds := make(rueidis.Commands, 0, len(sessions))
	for _, s := range sessions {
		k := keys.For(a.opts.prefix, s)
		cmds = append(cmds, c.B().Mget().Key(k.Count(), k.Clear()).Build())
	}
	rows := make([]sessionJSON, len(sessions))
	for i, res := range c.DoMulti(cctx, cmds...) {
		values, err := res.ToArray()
		if err != nil {
			return nil, err
		}
		if len(values) != 2 {
			return nil, fmt.Errorf("MGET of session %q returned %d values", sessions[i], len(values))
		}
		rows[i].Session = sessions[i]
		if !values[1].IsNil() {
			text, err := values[1].ToString()
			if err != nil {
				return nil, err
			}
			c, ok := keys.ParseClear(text)
			if !ok {
				return nil, fmt.Errorf("session %q: %q is not a clear marker", sessions[i], text)
			}
			rows[i].ClearIndex = c.Index
		}
		if values[0].IsNil() {
			rows[i].Head = rows[i].ClearIndex // a collapsed session keeps only its marker
		} else if rows[i].Head, err = optionalInt(values[0]); err != nil {
			return nil, err
		}
	}
	cmds = cmds[:0]
	for i, s := range sessions {
		runnable := keys.For(a.opts.prefix, s).Runnable()
		boundary := rows[i].ClearIndex
		cmds = append(cmds,
			c.B().Zcount().Key(runnable).Min("("+itoa(boundary)).Max("+inf").Build(),
			c.B().Zcount().Key(runnable).Min("-inf").Max("("+itoa(-boundary)).Build())
	}
	results := c.DoMulti(cctx, cmds...)
	for i := range rows {
		var err error
		if rows[i].Runnable, err = results[2*i].AsInt64(); err != nil {
			return nil, err
		}
		if rows[i].DeadLettered, err = results[2*i+1].AsInt64(); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func optionalInt(m rueidis.RedisMessage) (int64, error) {
	if m.IsNil() {
		return 0, nil
	}
	s, err := m.ToString()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

// eachSessionPage scans the log keys of the prefix on every node, one SCAN
// page at a time, and hands fn the session ids of each page that match the
// glob (empty: all). fn's error stops the scan and is returned.
func (a *app) eachSessionPage(ctx context.Context, match string, fn func([]string) error) error {
	pattern := a.sessionPattern(match)
	nodes, err := a.scanNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			page, next, err := a.scanStep(ctx, n, cursor, a.scanCount(), pattern, match)
			if err != nil {
				return err
			}
			if len(page) > 0 {
				if err := fn(page); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// sessionPattern is the SCAN MATCH pattern of the log and clear keys of
// the sessions matching the glob (empty: all): an ended session keeps its
// clear key alone.
func (a *app) sessionPattern(match string) string {
	head, tail := logKeyShape(a.opts.prefix)
	return keys.EscapeGlob(head) + pushdownGlob(match) + keys.EscapeGlob(strings.TrimSuffix(tail, "log")) + keys.SessionScanTail
}

// scanStep makes one SCAN call (COUNT count) on n from cursor and returns
// the session ids it found that match the glob, and the next cursor (0:
// done).
func (a *app) scanStep(ctx context.Context, n node, cursor uint64, count int, pattern, match string) ([]string, uint64, error) {
	cctx, cancel := a.call(ctx)
	entry, err := n.client.Do(cctx, n.client.B().Scan().Cursor(cursor).Match(pattern).Count(int64(count)).Build()).AsScanEntry()
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("SCAN on %s: %w", n.addr, err)
	}
	page := make([]string, 0, len(entry.Elements))
	var ended []string // sessions found by their clear key
	for _, key := range entry.Elements {
		session, ok := keys.SessionOfLogKey(a.opts.prefix, key)
		if ok && (match == "" || globMatch(match, session)) {
			page = append(page, session)
		}
		if session, ok := keys.SessionOfClearKey(a.opts.prefix, key); ok && (match == "" || globMatch(match, session)) {
			ended = append(ended, session)
		}
	}
	if len(ended) > 0 {
		// A session with a log is listed by its log key: a clear key
		// lists only the sessions that collapsed to their marker.
		cmds := make(rueidis.Commands, len(ended))
		for i, session := range ended {
			cmds[i] = n.client.B().Exists().Key(keys.For(a.opts.prefix, session).Log()).Build()
		}
		cctx, cancel := a.call(ctx)
		defer cancel()
		for i, res := range n.client.DoMulti(cctx, cmds...) {
			has, err := res.AsInt64()
			if err != nil {
				return nil, 0, fmt.Errorf("EXISTS on %s: %w", n.addr, err)
			}
			if has == 0 {
				page = append(page, ended[i])
			}
		}
	}
	return page, entry.Cursor, nil
}

// node is one server to scan.
type node struct {
	addr   string
	client rueidis.Client
}

// scanNodes returns the servers whose keys together are every key once: the
// one server, or every master of a cluster (a replica holds copies of its
// master's keys). A node whose role cannot be read is scanned anyway.
func (a *app) scanNodes(ctx context.Context) ([]node, error) {
	var nodes []node
	for addr, c := range a.client.Nodes() {
		nodes = append(nodes, node{addr: addr, client: c})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].addr < nodes[j].addr })
	if a.client.Mode() != rueidis.ClientModeCluster {
		return nodes, nil
	}
	masters := nodes[:0]
	for _, n := range nodes {
		role, err := a.nodeRole(ctx, n.client)
		if err == nil && role != "master" {
			continue
		}
		masters = append(masters, n)
	}
	if len(masters) == 0 {
		return nil, errors.New("the cluster reports no master node")
	}
	return masters, nil
}

// nodeRole asks one node for its replication role (ROLE): "master",
// "slave" or "sentinel".
func (a *app) nodeRole(ctx context.Context, c rueidis.Client) (string, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	reply, err := c.Do(cctx, c.B().Role().Build()).ToArray()
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	return reply[0].ToString()
}

// logKeyShape returns what every log key under prefix has before and after
// the contents of its session tag, derived from keys (which alone formats
// keys): `<prefix>:{"` and `"}:log` in layout a2redis-1.
func logKeyShape(prefix string) (head, tail string) {
	x, y := keys.For(prefix, "a").Log(), keys.For(prefix, "b").Log()
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	j := 0
	for j < len(x)-i && j < len(y)-i && x[len(x)-1-j] == y[len(y)-1-j] {
		j++
	}
	return x[:i], x[len(x)-j:]
}
