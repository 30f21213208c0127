package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"
)

func readyCommand() command {
	return command{
		name:    "ready",
		summary: "list the sessions with work (the ready index), per shard, and since when",
		details: `Lists the sessions the prefix's ready index holds: those with work, due
(claimable now: since when it waits) or held (work once a lease or retry
hold ends: when). Read shard by shard, earliest first, page by page (each a
short call), so an index of any size is listed without holding Redis.
Columns: SHARD, SESSION, STATE (due, held), AT (since when it is due, or
when its hold ends), WAIT (how long a due session has waited).
--stats prints one row per shard instead: SHARD, DUE, HELD, OLDEST (the
longest-waiting due session's time), WAITED (now - OLDEST), NEXT (the
earliest hold end): a few commands per shard whatever the size.
--shard N lists one shard; --limit N stops after N sessions.
JSON: {"shard","session","state","at"}, one object per line (NDJSON); with
--stats {"shard","due","held","oldest","next"} per line.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			var o readyOptions
			fs.BoolVar(&o.stats, "stats", false, "one summary row per shard instead of the sessions")
			fs.IntVar(&o.shard, "shard", -1, "list only shard `N`")
			fs.IntVar(&o.limit, "limit", 0, "list at most `N` sessions (0: all)")
			return runner{
				check: func([]string) error {
					if o.limit < 0 {
						return errors.New("--limit must not be negative")
					}
					return nil
				},
				run: func(ctx context.Context, a *app, _ []string) error { return a.ready(ctx, o) },
			}
		},
	}
}

type readyOptions struct {
	stats bool
	shard int
	limit int
}

type readyJSON struct {
	Shard   int      `json:"shard"`
	Session string   `json:"session"`
	State   string   `json:"state"`
	At      jsonTime `json:"at"`
}

type readyStatsJSON struct {
	Shard  int      `json:"shard"`
	Due    int64    `json:"due"`
	Held   int64    `json:"held"`
	Oldest jsonTime `json:"oldest"`
	Next   jsonTime `json:"next"`
}

func (a *app) ready(ctx context.Context, o readyOptions) error {
	shards := a.store.ReadyShards()
	if o.shard >= shards {
		return usagef("--shard %d: the prefix's ready index has %d shards (0 to %d)", o.shard, shards, shards-1)
	}
	now := a.env.Now()
	if o.stats {
		cctx, cancel := a.call(ctx)
		stats, err := a.store.ReadyStats(cctx)
		cancel()
		if err != nil {
			return err
		}
		t := newTable(a.out, "", "SHARD", "DUE", "HELD", "OLDEST", "WAITED", "NEXT")
		for _, st := range stats {
			if o.shard >= 0 && st.Shard != o.shard {
				continue
			}
			if a.opts.json {
				if err := writeLine(a.out, readyStatsJSON{Shard: st.Shard, Due: st.Due, Held: st.Held, Oldest: jsonTime(st.Oldest), Next: jsonTime(st.Next)}); err != nil {
					return err
				}
				continue
			}
			t.row(itoa(int64(st.Shard)), itoa(st.Due), itoa(st.Held), formatTime(st.Oldest), age(st.Oldest, now), formatTime(st.Next))
		}
		return t.close()
	}
	t := newTable(a.out, fmt.Sprintf("no sessions with work under prefix %q", a.opts.prefix), "SHARD", "SESSION", "STATE", "AT", "WAIT")
	listed := 0
	for shard := range shards {
		if o.shard >= 0 && shard != o.shard {
			continue
		}
		var after time.Time
		for {
			cctx, cancel := a.call(ctx)
			page, next, err := a.store.ReadyPage(cctx, shard, after, a.pageLimit())
			cancel()
			if err != nil {
				return err
			}
			for _, r := range page {
				if o.limit > 0 && listed >= o.limit {
					return a.endReady(t)
				}
				listed++
				state, wait := "due", age(r.At, now)
				if r.At.After(now) {
					state, wait = "held", "-"
				}
				if a.opts.json {
					if err := writeLine(a.out, readyJSON{Shard: shard, Session: r.Session, State: state, At: jsonTime(r.At)}); err != nil {
						return err
					}
					continue
				}
				t.row(itoa(int64(shard)), r.Session, state, formatTime(r.At), wait)
			}
			if err := a.flushRows(t); err != nil {
				return err
			}
			if next.IsZero() {
				break
			}
			after = next
		}
	}
	return a.endReady(t)
}

func (a *app) flushRows(t *table) error {
	if err := t.flush(); err != nil {
		return err
	}
	return a.out.Flush()
}

func (a *app) endReady(t *table) error {
	if a.opts.json {
		return nil
	}
	return t.close()
}
