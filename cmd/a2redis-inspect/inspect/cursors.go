package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sort"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// errorWidth is how many characters of an error text a table shows.
const errorWidth = 80

// The states of a cursor in the cursors table.
const (
	stateIdle      = "idle"       // no head: caught up
	stateReady     = "ready"      // a head nobody holds: waiting for a worker
	stateClaimed   = "claimed"    // a worker holds an unexpired claim
	stateOrphaned  = "orphaned"   // an unexpired claim of a worker whose heartbeat stopped: taken over once CLAIM_EXPIRES passes
	stateLapsed    = "lapsed"     // the claim expired: the next claim takes it over alone, saying why
	stateRetryWait = "retry-wait" // a failure holds it back until CLAIM_EXPIRES
	stateDead      = "dead"       // dead-lettered: the cursor stops here until a redrive
)

func cursorsCommand() command {
	return command{
		name:    "cursors",
		args:    []string{"SESSION"},
		summary: "show every consumer's cursor, its head, claim, failures and LAG",
		details: `The "is my consumer stuck?" view. One row per lane and log cursor and per
event cursor with a head.
Columns: CONSUMER, KIND (event, lane, log), LANE, POSITION (last index the
cursor moved past), HEAD (index it must handle next, "-" if none), LAG
(how far behind it is: session head - HEAD + 1, the events appended since
the one it must handle next, that one included; 0 for a cursor with no
head, which is caught up), STATE, ATTEMPTS, FAILURES, HOLDER, CLAIM_EXPIRES
(claim expiry, or the end of a retry hold), DEAD_LETTERED (when),
LAST_ERROR (cut at 80 characters). Sorted by consumer, lane (event cursors
last) and head; read in small pages, each its own call.
STATE: idle (no head: caught up), ready (waiting for a worker), claimed (a
worker holds it), orphaned (claimed by a worker whose heartbeat stopped —
its record left the worker registry: nothing runs it, and the next claim
takes it over once CLAIM_EXPIRES passes), lapsed (the claim expired
unreported: the next claim
takes it over alone and records why in LAST_ERROR, counting a failure
when the holder lost no other head of the session), retry-wait (failed, held back until CLAIM_EXPIRES), dead
(dead-lettered: stuck until 'redrive').
JSON: {"session","consumer","kind","lane","position","head","lag","state",
"attempts","failures","holder","first_claimed_at","last_claimed_at",
"claim_expires_at","last_failed_at","last_error","dead_lettered",
"dead_lettered_at"}, one cursor per line (NDJSON); head is 0 when none.`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, args []string) error { return a.cursors(ctx, args[0]) }}
		},
	}
}

// cursorJSON is one cursor in JSON output.
type cursorJSON struct {
	Session        string   `json:"session"`
	Consumer       string   `json:"consumer"`
	Kind           string   `json:"kind"`
	Lane           string   `json:"lane"`
	Position       int64    `json:"position"`
	Head           int64    `json:"head"`
	Lag            int64    `json:"lag"`
	State          string   `json:"state"`
	Attempts       int64    `json:"attempts"`
	Failures       int64    `json:"failures"`
	Holder         string   `json:"holder"`
	FirstClaimedAt jsonTime `json:"first_claimed_at"`
	LastClaimedAt  jsonTime `json:"last_claimed_at"`
	ClaimExpiresAt jsonTime `json:"claim_expires_at"`
	LastFailedAt   jsonTime `json:"last_failed_at"`
	LastError      string   `json:"last_error"`
	DeadLettered   bool     `json:"dead_lettered"`
	DeadLetteredAt jsonTime `json:"dead_lettered_at"`
}

// cursorState judges a cursor at now; gone holds the holders whose
// heartbeat stopped (goneHolders).
func cursorState(c a2redis.Cursor, now time.Time, gone map[string]time.Time) string {
	switch {
	case c.Head == 0:
		return stateIdle
	case c.DeadLettered():
		return stateDead
	case c.Holder != "" && c.ClaimExpiresAt.After(now):
		if _, ok := gone[c.Holder]; ok {
			return stateOrphaned
		}
		return stateClaimed
	case c.Holder != "":
		return stateLapsed
	case c.ClaimExpiresAt.After(now):
		return stateRetryWait
	}
	return stateReady
}

// lag is how far behind a cursor is at session head `head`: the events
// appended since the one it must handle next, that one included; 0 when it
// has none (caught up, whatever kind it is).
func lag(c a2redis.Cursor, head int64) int64 {
	if c.Head == 0 {
		return 0
	}
	return max(head-c.Head+1, 0)
}

// pageLimit is how many cursors or dead letters one call reads, unless
// Env.pageLimit says otherwise: small pages, each a call of its own bounded
// by --timeout, so listing a session of any size never holds the server
// long.
const pageLimit = 100

func (a *app) pageLimit() int {
	if a.env.pageLimit > 0 {
		return a.env.pageLimit
	}
	return pageLimit
}

// eachCursorPage hands fn the session's cursors page by page.
func (a *app) eachCursorPage(ctx context.Context, session string, fn func([]a2redis.Cursor) error) error {
	req := redisstore.PageRequest{Limit: a.pageLimit()}
	for {
		cctx, cancel := a.call(ctx)
		page, err := a.store.CursorsPage(cctx, session, req)
		cancel()
		if err != nil {
			return err
		}
		if err := fn(page.Cursors); err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		req.After = page.Next
	}
}

// eachDeadLetterPage hands fn the session's dead-lettered heads page by
// page, lowest index first.
func (a *app) eachDeadLetterPage(ctx context.Context, session string, fn func([]a2redis.HeadEvent) error) error {
	req := redisstore.PageRequest{Limit: a.pageLimit()}
	for {
		cctx, cancel := a.call(ctx)
		page, err := a.store.DeadLettersPage(cctx, session, req)
		cancel()
		if err != nil {
			return err
		}
		if err := fn(page.DeadLetters); err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		req.After = page.Next
	}
}

// listCursors reads every cursor of the session, each once (a cursor that
// moved while the pages were read shows as its last page saw it), sorted
// by consumer, lane (event cursors last) and head.
func (a *app) listCursors(ctx context.Context, session string) ([]a2redis.Cursor, error) {
	var out []a2redis.Cursor
	at := map[string]int{}
	err := a.eachCursorPage(ctx, session, func(page []a2redis.Cursor) error {
		for _, c := range page {
			key := c.Consumer + "\x00" + string(c.Kind) + "\x00" + c.Lane
			if c.Kind == a2redis.EventCursor {
				key += "\x00" + itoa(c.Head)
			}
			if i, ok := at[key]; ok {
				out[i] = c
				continue
			}
			at[key] = len(out)
			out = append(out, c)
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.Consumer != y.Consumer {
			return x.Consumer < y.Consumer
		}
		if (x.Kind == a2redis.EventCursor) != (y.Kind == a2redis.EventCursor) {
			return y.Kind == a2redis.EventCursor
		}
		if x.Lane != y.Lane {
			return x.Lane < y.Lane
		}
		return x.Head < y.Head
	})
	return out, err
}

// judgedCursors lists a session's cursors (page by page) with what
// cursorState judges them by: the time now and the holders whose
// heartbeat stopped.
func (a *app) judgedCursors(ctx context.Context, session string) ([]a2redis.Cursor, time.Time, map[string]time.Time, error) {
	cursors, err := a.listCursors(ctx, session)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	now := a.env.Now()
	gone, err := a.goneHolders(ctx, cursors, now)
	return cursors, now, gone, err
}

// goneHolders returns the holders of the cursors' unexpired claims whose
// heartbeat stopped (Store.GoneWorkers): one registry read, none when no
// claim is held.
func (a *app) goneHolders(ctx context.Context, cursors []a2redis.Cursor, now time.Time) (map[string]time.Time, error) {
	seen := map[string]bool{}
	var holders []string
	for _, c := range cursors {
		if c.Head > 0 && !c.DeadLettered() && c.Holder != "" && c.ClaimExpiresAt.After(now) && !seen[c.Holder] {
			seen[c.Holder] = true
			holders = append(holders, c.Holder)
		}
	}
	if len(holders) == 0 {
		return nil, nil
	}
	return a.store.GoneWorkers(ctx, holders)
}

func (a *app) cursors(ctx context.Context, session string) error {
	b, err := a.bounds(ctx, session)
	if err != nil {
		return err
	}
	cursors, now, gone, err := a.judgedCursors(ctx, session)
	if err != nil {
		return err
	}
	rows := make([]cursorJSON, 0, len(cursors))
	for _, c := range cursors {
		rows = append(rows, cursorJSON{
			Session: session, Consumer: c.Consumer, Kind: string(c.Kind), Lane: c.Lane,
			Position: c.Position, Head: c.Head, Lag: lag(c, b.Head), State: cursorState(c, now, gone),
			Attempts: c.Attempts, Failures: c.Failures, Holder: c.Holder,
			FirstClaimedAt: jsonTime(c.FirstClaimedAt), LastClaimedAt: jsonTime(c.LastClaimedAt),
			ClaimExpiresAt: jsonTime(c.ClaimExpiresAt), LastFailedAt: jsonTime(c.LastFailedAt),
			LastError: c.LastError, DeadLettered: c.DeadLettered(), DeadLetteredAt: jsonTime(c.DeadLetteredAt),
		})
	}
	if a.opts.json {
		for _, r := range rows {
			if err := writeLine(a.out, r); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, fmt.Sprintf("no cursors in session %q (head %d)", session, b.Head),
		"CONSUMER", "KIND", "LANE", "POSITION", "HEAD", "LAG", "STATE", "ATTEMPTS", "FAILURES", "HOLDER", "CLAIM_EXPIRES", "DEAD_LETTERED", "LAST_ERROR")
	dead := 0
	for _, c := range rows {
		head := "-"
		if c.Head > 0 {
			head = itoa(c.Head)
		}
		if c.DeadLettered {
			dead++
		}
		t.row(c.Consumer, c.Kind, c.Lane, itoa(c.Position), head, itoa(c.Lag), c.State, itoa(c.Attempts), itoa(c.Failures),
			c.Holder, formatTime(time.Time(c.ClaimExpiresAt)), formatTime(time.Time(c.DeadLetteredAt)), truncate(c.LastError, errorWidth))
	}
	if err := t.close(); err != nil {
		return err
	}
	if dead > 0 {
		a.hint("%s dead-lettered: see '%s dead %s'", plural(dead, "head is", "heads are"), name, shellQuote(session))
	}
	return nil
}

func deadCommand() command {
	return command{
		name:     "dead",
		args:     []string{"SESSION"},
		optional: 1,
		argsText: "SESSION|--all",
		summary:  "list a session's dead-lettered heads, or --all sessions', with their last error",
		details: `Columns: CONSUMER, KIND, LANE, INDEX, TYPE (of the event), ATTEMPTS,
FAILURES, DEAD_LETTERED (when), LAST_ERROR (full text). Sorted by index,
then consumer; read in small pages, each its own call.
Act on one with 'redrive SESSION CONSUMER INDEX --retry|--skip'.
With --all (and no SESSION), the dead letters of every session, from the
store's dead index (no keyspace scan): a SESSION column first, the
sessions that have held dead letters longest first, each session's by
index; --consumer C keeps consumer C's, --error TEXT those whose last error
contains TEXT. A summary line follows on stderr. Redrive them with
'redrive --all-sessions --consumer C --retry|--skip'.
JSON: {"session","consumer","kind","lane","index","event_id","type",
"created_at","attempts","failures","holder","last_failed_at","last_error",
"dead_lettered_at","payload"}, one dead letter per line (NDJSON).`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var o deadOptions
			fs.BoolVar(&o.all, "all", false, "list the dead letters of every session (no SESSION)")
			fs.Var(&o.consumer, "consumer", "with --all, only the dead letters of consumer `C`")
			fs.Var(&o.errText, "error", "with --all, only the dead letters whose last error contains `TEXT`")
			return runner{
				check: func(args []string) error {
					switch {
					case o.all && len(args) > 0:
						return errors.New("dead --all takes no SESSION (filter with --consumer and --error)")
					case !o.all && len(args) != 1:
						return errors.New("dead takes SESSION, or --all")
					case !o.all && (o.consumer.set || o.errText.set):
						return errors.New("--consumer and --error filter dead --all")
					case o.consumer.set && o.consumer.value == "":
						return errors.New("--consumer is empty")
					}
					return nil
				},
				run: func(ctx context.Context, a *app, args []string) error {
					if o.all {
						return a.deadAll(ctx, o)
					}
					return a.dead(ctx, args[0])
				},
			}
		},
	}
}

type deadOptions struct {
	all               bool
	consumer, errText optionalString
}

// deadJSON is one dead-lettered head in JSON output.
type deadJSON struct {
	Session        string          `json:"session"`
	Consumer       string          `json:"consumer"`
	Kind           string          `json:"kind"`
	Lane           string          `json:"lane"`
	Index          int64           `json:"index"`
	EventID        string          `json:"event_id"`
	Type           string          `json:"type"`
	CreatedAt      jsonTime        `json:"created_at"`
	Attempts       int64           `json:"attempts"`
	Failures       int64           `json:"failures"`
	Holder         string          `json:"holder"`
	LastFailedAt   jsonTime        `json:"last_failed_at"`
	LastError      string          `json:"last_error"`
	DeadLetteredAt jsonTime        `json:"dead_lettered_at"`
	Payload        json.RawMessage `json:"payload"`
}

func toDeadJSON(h a2redis.HeadEvent) deadJSON {
	return deadJSON{
		Session: h.Session, Consumer: h.Consumer, Kind: string(h.Kind), Lane: h.Lane, Index: h.Index,
		EventID: h.ID, Type: h.Type, CreatedAt: jsonTime(h.CreatedAt),
		Attempts: h.Attempts, Failures: h.Failures, Holder: h.Holder,
		LastFailedAt: jsonTime(h.LastFailedAt), LastError: h.LastError,
		DeadLetteredAt: jsonTime(h.DeadLetteredAt), Payload: rawJSON(h.Payload),
	}
}

// deadLetters reads the session's dead-lettered heads that keep(h) (nil:
// all), each once, sorted by index then consumer.
func (a *app) deadLetters(ctx context.Context, session string, keep func(a2redis.HeadEvent) bool) ([]a2redis.HeadEvent, error) {
	var out []a2redis.HeadEvent
	seen := map[string]bool{}
	err := a.eachDeadLetterPage(ctx, session, func(page []a2redis.HeadEvent) error {
		for _, h := range page {
			key := h.Consumer + "\x00" + string(h.Kind) + "\x00" + h.Lane + "\x00" + itoa(h.Index)
			if !seen[key] && (keep == nil || keep(h)) {
				seen[key] = true
				out = append(out, h)
			}
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].Consumer < out[j].Consumer
	})
	return out, err
}

func (a *app) dead(ctx context.Context, session string) error {
	heads, err := a.deadLetters(ctx, session, nil)
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, h := range heads {
			d := toDeadJSON(h)
			d.Session = session
			if err := writeLine(a.out, d); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, fmt.Sprintf("no dead-lettered heads in session %q", session),
		"CONSUMER", "KIND", "LANE", "INDEX", "TYPE", "ATTEMPTS", "FAILURES", "DEAD_LETTERED", "LAST_ERROR")
	for _, h := range heads {
		t.row(h.Consumer, string(h.Kind), h.Lane, itoa(h.Index), h.Type, itoa(h.Attempts), itoa(h.Failures), formatTime(h.DeadLetteredAt), h.LastError)
	}
	if err := t.close(); err != nil {
		return err
	}
	if len(heads) > 0 {
		h := heads[0]
		a.hint("redrive one with: %s redrive %s %s %d --retry   (or --skip to move past it)", name, shellQuote(session), shellQuote(h.Consumer), h.Index)
	}
	return nil
}
