package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// payloadWidth is how many characters of a payload a table shows without
// --raw.
const payloadWidth = 120

// maxTailRead is the most events one ReadTail returns; a longer tail is
// streamed page by page instead.
const maxTailRead = 1000

const eventDetails = `Columns: INDEX, ID, TYPE, CREATED (RFC 3339, UTC), CAUSE and PAYLOAD.
CAUSE names the consumer attempt that produced the event as
consumer@index#attempt (event cursor) or consumer/lane@index#attempt (lane
or log cursor), "-" when none. PAYLOAD is compact JSON cut at 120
characters; --raw prints it exactly as stored, uncut.
JSON: {"index","id","type","created_at","cause":{"consumer","lane","index",
"attempt"}|null,"payload"}, plus "not_before" for a scheduled event, one
event per line (NDJSON).`

func logCommand() command {
	return command{
		name:    "log",
		args:    []string{"SESSION"},
		summary: "list a session's events in index order, streamed page by page",
		details: `Lists the events of the session's current lifetime (reads start at the
latest clear marker), up to the head it had when the command started.
` + eventDetails,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var o logOptions
			fs.Int64Var(&o.after, "after", 0, "list events after index `N`")
			fs.Int64Var(&o.through, "through", 0, "list events up to index `N` (0: the head)")
			fs.IntVar(&o.limit, "limit", 0, "list at most `N` events (0: all)")
			fs.Var(&o.types, "type", "list only events of type `T` (repeat or comma-separate for several)")
			fs.BoolVar(&o.raw, "raw", false, "print payloads exactly as stored, uncut")
			return runner{
				check: func([]string) error {
					if o.after < 0 || o.through < 0 || o.limit < 0 {
						return errors.New("--after, --through and --limit must not be negative")
					}
					return nil
				},
				run: func(ctx context.Context, a *app, args []string) error { return a.log(ctx, args[0], o) },
			}
		},
	}
}

type logOptions struct {
	after, through int64
	limit          int
	types          stringList
	raw            bool
}

// eventJSON is an event in JSON output.
type eventJSON struct {
	Index     int64           `json:"index"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt jsonTime        `json:"created_at"`
	Cause     *causeJSON      `json:"cause"`
	Payload   json.RawMessage `json:"payload"`
	NotBefore *jsonTime       `json:"not_before,omitempty"`
}

type causeJSON struct {
	Consumer string `json:"consumer"`
	Lane     string `json:"lane"`
	Index    int64  `json:"index"`
	Attempt  int64  `json:"attempt"`
}

func toEventJSON(e a2redis.StoredEvent) eventJSON {
	out := eventJSON{Index: e.Index, ID: e.ID, Type: e.Type, CreatedAt: jsonTime(e.CreatedAt), Payload: rawJSON(e.Payload)}
	if e.Cause != nil {
		out.Cause = &causeJSON{Consumer: e.Cause.Consumer, Lane: e.Cause.Lane, Index: e.Cause.Index, Attempt: e.Cause.Attempt}
	}
	if !e.NotBefore.IsZero() {
		at := jsonTime(e.NotBefore)
		out.NotBefore = &at
	}
	return out
}

func causeText(c *a2redis.Cause) string {
	if c == nil {
		return ""
	}
	if c.Lane == "" {
		return fmt.Sprintf("%s@%d#%d", c.Consumer, c.Index, c.Attempt)
	}
	return fmt.Sprintf("%s/%s@%d#%d", c.Consumer, c.Lane, c.Index, c.Attempt)
}

func payloadText(payload []byte, raw bool) string {
	if raw {
		return string(payload)
	}
	return truncate(string(rawJSON(payload)), payloadWidth)
}

// eventPrinter prints events as a table or as JSON Lines (one event per
// line), flushing stdout page by page.
type eventPrinter struct {
	a     *app
	raw   bool
	table *table
}

func (a *app) newEventPrinter(session string, raw, filtered bool) *eventPrinter {
	p := &eventPrinter{a: a, raw: raw}
	if !a.opts.json {
		empty := fmt.Sprintf("no events in session %q", session)
		if filtered {
			empty = fmt.Sprintf("no events in session %q match", session)
		}
		p.table = newTable(a.out, empty, "INDEX", "ID", "TYPE", "CREATED", "CAUSE", "PAYLOAD")
	}
	return p
}

func (p *eventPrinter) add(events []a2redis.StoredEvent) error {
	for _, e := range events {
		switch {
		case p.table != nil:
			p.table.row(itoa(e.Index), e.ID, e.Type, formatTime(e.CreatedAt), causeText(e.Cause), payloadText(e.Payload, p.raw))
		default:
			b, err := marshal(toEventJSON(e))
			if err != nil {
				return err
			}
			if _, err := p.a.out.Write(append(b, '\n')); err != nil {
				return err
			}
		}
	}
	return p.flush()
}

func (p *eventPrinter) flush() error {
	if p.table != nil {
		if err := p.table.flush(); err != nil {
			return err
		}
	}
	return p.a.out.Flush()
}

func (p *eventPrinter) end() error {
	if p.table != nil {
		if err := p.table.close(); err != nil {
			return err
		}
	}
	return p.a.out.Flush()
}

func (a *app) bounds(ctx context.Context, session string) (redisstore.Bounds, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	return a.store.Bounds(cctx, session)
}

func (a *app) log(ctx context.Context, session string, o logOptions) error {
	b, err := a.bounds(ctx, session)
	if err != nil {
		return err
	}
	p := a.newEventPrinter(session, o.raw, o.after > 0 || o.through > 0 || len(o.types) > 0)
	last := b.Head
	if o.through > 0 && o.through < last {
		last = o.through
	}
	var filter func(a2redis.StoredEvent) bool
	if len(o.types) > 0 {
		filter = func(e a2redis.StoredEvent) bool { return slices.Contains(o.types, e.Type) }
	}
	if err := a.streamEvents(ctx, session, b, o.after, last, o.limit, filter, p.add); err != nil {
		return err
	}
	return p.end()
}

// streamEvents reads the events after `after` through `last` one page per
// call (each call bounded by --timeout, output written between calls), so
// neither memory nor a slow reader of the output grows with the log.
// filter (nil: all) picks the events to hand to fn; limit (0: none) stops
// after that many.
func (a *app) streamEvents(ctx context.Context, session string, b redisstore.Bounds, after, last int64, limit int, filter func(a2redis.StoredEvent) bool, fn func([]a2redis.StoredEvent) error) error {
	pos := max(after, b.ClearIndex-1)
	if after == 0 {
		pos = max(pos, b.Floor) // from the start: the retained log (a trim's floor)
	}
	given := 0
	for pos < last && (limit == 0 || given < limit) {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(last, pos+redisstore.ReadPageSize)
		var page []a2redis.StoredEvent
		cctx, cancel := a.call(ctx)
		err := a.store.ReadPages(cctx, session, pos, end, func(events []a2redis.StoredEvent) error {
			page = append(page, events...)
			return nil
		})
		cancel()
		if err != nil {
			return err
		}
		if len(page) == 0 {
			// A clear moved the start of the lifetime past this range.
			nb, err := a.bounds(ctx, session)
			if err != nil {
				return err
			}
			if nb.ClearIndex-1 > pos {
				pos = nb.ClearIndex - 1
				continue
			}
			return fmt.Errorf("%w: session %q has no events after index %d although its head is %d", a2redis.ErrRangeGap, session, pos, nb.Head)
		}
		pos = page[len(page)-1].Index
		if filter != nil {
			page = slices.DeleteFunc(page, func(e a2redis.StoredEvent) bool { return !filter(e) })
		}
		if limit > 0 && given+len(page) > limit {
			page = page[:limit-given]
		}
		given += len(page)
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
	}
	return nil
}

func tailCommand() command {
	return command{
		name:    "tail",
		args:    []string{"SESSION"},
		summary: "show a session's newest events; -f follows new ones live",
		details: `Shows the newest N events of the session's current lifetime. With -f it
then follows the session live (pub/sub wake-ups, catching up by reading
when one is missed) until interrupted with Ctrl-C, which exits 0; while it
follows, it keeps the session's 'followed' mark set (a key with an expiry:
appends publish wake-ups only while a reader follows). Events that arrive
live show their CAUSE as 'log' does: wake-ups do not carry it, so each live
batch is read back (one XRANGE). With -f a session that does not exist yet
is waited for (a line on stderr says so): its events print from the first.
` + eventDetails,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			var o tailOptions
			fs.IntVar(&o.n, "n", 20, "show the newest `N` events")
			fs.BoolVar(&o.follow, "f", false, "follow: print new events as they are appended, until Ctrl-C")
			fs.BoolVar(&o.raw, "raw", false, "print payloads exactly as stored, uncut")
			fs.BoolVar(&o.sharded, "sharded", false, "follow with SSUBSCRIBE, for stores that publish with SPUBLISH (ShardedPubSub)")
			return runner{
				check: func([]string) error {
					if o.n < 0 {
						return errors.New("-n must not be negative")
					}
					return nil
				},
				run: func(ctx context.Context, a *app, args []string) error { return a.tail(ctx, args[0], o) },
			}
		},
	}
}

type tailOptions struct {
	n       int
	follow  bool
	raw     bool
	sharded bool
}

func (a *app) tail(ctx context.Context, session string, o tailOptions) error {
	var noSession *errNoSession
	if err := a.requireSession(ctx, session); errors.As(err, &noSession) && o.follow {
		// tail -f waits for a session that does not exist yet.
		fmt.Fprintf(a.env.Stderr, "waiting for session %s (prefix %q) to get its first event…\n", strconv.Quote(session), a.opts.prefix)
		return a.follow(ctx, session, 0, a.newEventPrinter(session, o.raw, false), o)
	} else if err != nil {
		return err
	}
	b, err := a.bounds(ctx, session)
	if err != nil {
		return err
	}
	p := a.newEventPrinter(session, o.raw, false)
	pos := b.Head
	switch {
	case o.n == 0:
	case o.n <= maxTailRead:
		cctx, cancel := a.call(ctx)
		events, err := a.store.ReadTail(cctx, session, o.n)
		cancel()
		if err != nil {
			return err
		}
		if err := p.add(events); err != nil {
			return err
		}
		if len(events) > 0 {
			pos = events[len(events)-1].Index
		}
	default:
		if err := a.streamEvents(ctx, session, b, max(b.Head-int64(o.n), 0), b.Head, 0, nil, p.add); err != nil {
			return err
		}
	}
	if !o.follow {
		return p.end()
	}
	return a.follow(ctx, session, pos, p, o)
}

// follow prints the session's events after pos as they are appended, until
// ctx ends (Ctrl-C: a clean end).
func (a *app) follow(ctx context.Context, session string, pos int64, p *eventPrinter, o tailOptions) error {
	store := a.store
	if o.sharded != store.ShardedPubSub() {
		// A feed subscribes in its store's publish mode: with --sharded,
		// through a store like this one that publishes with SPUBLISH (New
		// writes nothing on a prefix that has its schema).
		cctx, cancel := a.call(ctx)
		s, err := redisstore.New(cctx, a.client, redisstore.Config{Prefix: a.opts.prefix, Clock: a.env.Now, ReadyShards: store.ReadyShards(), ShardedPubSub: o.sharded})
		cancel()
		if err != nil {
			return err
		}
		store = s
	}
	feed := notify.NewFeed(store, notify.FeedOptions{Source: timedSource{a: a}})
	err := feed.Follow(ctx, session, pos, func(u notify.Update) error {
		events, err := a.withCauses(ctx, session, u)
		if err != nil {
			return err
		}
		return p.add(events)
	})
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Ctrl-C is how a follow ends.
		if err := p.end(); err != nil {
			return err
		}
		return nil
	}
	return err
}

// withCauses returns an update's events with their causes: wake-ups carry
// events without them, so a carried batch is read back (one XRANGE, the
// events are immutable); a catch-up read has them already. Should the read
// not give the same events (a clear and reclaim in between), the carried
// ones are shown as they are.
func (a *app) withCauses(ctx context.Context, session string, u notify.Update) ([]a2redis.StoredEvent, error) {
	if u.CaughtUp || len(u.Events) == 0 || !slices.ContainsFunc(u.Events, func(e a2redis.StoredEvent) bool { return e.Cause == nil }) {
		return u.Events, nil
	}
	first, last := u.Events[0].Index, u.Events[len(u.Events)-1].Index
	var read []a2redis.StoredEvent
	err := timedSource{a: a}.ReadPages(ctx, session, first-1, last, func(events []a2redis.StoredEvent) error {
		read = append(read, events...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(read) != len(u.Events) {
		return u.Events, nil
	}
	for i := range read {
		if read[i].Index != u.Events[i].Index || read[i].ID != u.Events[i].ID {
			return u.Events, nil
		}
	}
	return read, nil
}

// timedSource is the store as a feed's source, each read bounded by
// --timeout.
type timedSource struct{ a *app }

// ReadPages implements notify.Source.
func (s timedSource) ReadPages(ctx context.Context, session string, after, through int64, fn func([]a2redis.StoredEvent) error) error {
	cctx, cancel := s.a.call(ctx)
	defer cancel()
	return s.a.store.ReadPages(cctx, session, after, through, fn)
}

// ClearIndex implements notify.Source.
func (s timedSource) ClearIndex(ctx context.Context, session string) (int64, error) {
	cctx, cancel := s.a.call(ctx)
	defer cancel()
	return s.a.store.ClearIndex(cctx, session)
}
