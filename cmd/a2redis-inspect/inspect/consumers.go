package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/a2redis/a2redis"
)

func consumersCommand() command {
	return command{
		name:     "consumers",
		args:     []string{"ACTION", "NAME"},
		optional: 2,
		argsText: "[list | add NAME | remove NAME | backfill NAME]",
		summary:  "list or change the prefix's consumer registry; backfill a typed log consumer over every session",
		details: `The consumer registry is the prefix's list of consumers, kept in Redis
(<prefix>:{c}:consumers): every store of the prefix serves it, whatever its
own configuration, so an append from any store starts the typed log
cursors of the registered log consumers.
  list (the default)  the registered consumers: NAME, STATE (running or
                      paused: see pause), KIND (events: event
                      and lane heads by target; log: a typed log cursor),
                      LANE, TYPES, START (backfill: from the start of each
                      session's lifetime; new: from the first append that
                      serves it), PER-SESSION (the most of a session's heads
                      in flight at once, or -), MAX-FAILURES (the failures
                      that dead-letter its heads, or -: the worker's or the
                      request's), then the registry's version.
  add NAME            registers NAME: an event/lane consumer, or with
                      --log-lane L a typed log consumer (--types t1,t2;
                      every type without; --backfill). --per-session K
                      runs at most K of a session's heads of an event/lane
                      consumer at once across the prefix (1: one at a time);
                      --max-failures N dead-letters its heads at N failures
                      (for every worker of the prefix).
                      A consumer already registered the same way is left
                      alone (with other settings, they change);
                      one registered otherwise fails (remove it first).
                      Every store serves it within its ConsumerRefresh (1s).
  remove NAME         removes NAME (confirmed unless --yes). Its heads stay
                      in their sessions and run again once it is added back.
  backfill NAME       starts (or wakes) NAME's log cursor in every session
                      of the prefix, a session at a time (one WakeLog call
                      each) over the SCAN pages of the sessions: for a log
                      consumer added to a prefix that already holds
                      sessions which may get no further append. Progress
                      goes to stderr; JSON: one {"session","head"} per
                      session with work, then {"sessions","with_work"}.
JSON: {"name","kind","lane","types","backfill","per_session","max_failures","paused"} per consumer (list), one
per line.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			var o consumerOptions
			fs.StringVar(&o.logLane, "log-lane", "", "with add: a typed log consumer reading lane `L`")
			fs.StringVar(&o.types, "types", "", "with add --log-lane: the comma-separated event `TYPES` it reads (default every type)")
			fs.BoolVar(&o.backfill, "backfill", false, "with add --log-lane: start each session's cursor at the start of its lifetime")
			fs.IntVar(&o.perSession, "per-session", 0, "with add: at most `K` of a session's heads in flight at once (0: no limit)")
			fs.IntVar(&o.maxFailures, "max-failures", 0, "with add: dead-letter its heads at `N` failures (0: the worker's or the request's)")
			fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
			fs.BoolVar(&o.yes, "y", false, "short for --yes")
			return runner{
				check: func(args []string) error {
					action := "list"
					if len(args) > 0 {
						action = args[0]
					}
					switch action {
					case "list":
						if len(args) > 1 {
							return errors.New("consumers list takes no NAME")
						}
					case "add", "remove", "backfill":
						if len(args) != 2 {
							return fmt.Errorf("consumers %s takes NAME", action)
						}
					default:
						return fmt.Errorf("unknown consumers action %q (list, add, remove, backfill)", action)
					}
					if (o.types != "" || o.backfill) && o.logLane == "" {
						return errors.New("--types and --backfill need --log-lane")
					}
					if o.logLane != "" && action != "add" {
						return errors.New("--log-lane, --types and --backfill go with add")
					}
					if o.perSession != 0 && (action != "add" || o.logLane != "") {
						return errors.New("--per-session goes with add, for an event/lane consumer (not --log-lane)")
					}
					if o.perSession < 0 {
						return fmt.Errorf("--per-session is negative (%d)", o.perSession)
					}
					if o.maxFailures != 0 && action != "add" {
						return errors.New("--max-failures goes with add")
					}
					if o.maxFailures < 0 {
						return fmt.Errorf("--max-failures is negative (%d)", o.maxFailures)
					}
					return nil
				},
				run: func(ctx context.Context, a *app, args []string) error {
					if len(args) == 0 {
						args = []string{"list"}
					}
					switch args[0] {
					case "add":
						return a.addConsumer(ctx, args[1], o)
					case "remove":
						return a.removeConsumer(ctx, args[1], o)
					case "backfill":
						return a.backfillConsumer(ctx, args[1])
					}
					return a.listConsumers(ctx)
				},
			}
		},
	}
}

type consumerOptions struct {
	logLane     string
	types       string
	backfill    bool
	perSession  int
	maxFailures int
	yes         bool
}

type consumerJSON struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Lane     string   `json:"lane,omitempty"`
	Types    []string `json:"types,omitempty"`
	Backfill bool     `json:"backfill"`
	// PerSession is the consumer's PerSession limit (0: none).
	PerSession int `json:"per_session"`
	// MaxFailures is the consumer's MaxFailures setting (0: none).
	MaxFailures int  `json:"max_failures"`
	Paused      bool `json:"paused"`
}

func (a *app) listConsumers(ctx context.Context) error {
	cctx, cancel := a.call(ctx)
	list, version, err := a.store.ReadConsumers(cctx)
	cancel()
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, c := range list {
			j := consumerJSON{Name: c.Name, Kind: "events", PerSession: c.PerSession, MaxFailures: c.MaxFailures, Paused: slices.Contains(a.store.Paused(), c.Name)}
			if c.Log != nil {
				j.Kind, j.Lane, j.Types, j.Backfill = "log", c.Log.Lane, c.Log.Types, c.Log.Backfill
			}
			if err := writeLine(a.out, j); err != nil {
				return err
			}
		}
		return nil
	}
	paused := map[string]bool{}
	for _, n := range a.store.Paused() {
		paused[n] = true
	}
	state := func(name string) string {
		if paused[name] {
			return "paused"
		}
		return "running"
	}
	t := newTable(a.out, fmt.Sprintf("no consumers registered under prefix %q (stores then serve every consumer)", a.opts.prefix),
		"NAME", "STATE", "KIND", "LANE", "TYPES", "START", "PER-SESSION", "MAX-FAILURES")
	setting := func(n int) string {
		if n > 0 {
			return strconv.Itoa(n)
		}
		return "-"
	}
	for _, c := range list {
		if c.Log == nil {
			t.row(printable(c.Name), state(c.Name), "events", "", "", "", setting(c.PerSession), setting(c.MaxFailures))
			continue
		}
		types, start := "*", "new"
		if c.Log.Types != nil {
			types = printable(strings.Join(c.Log.Types, ","))
		}
		if c.Log.Backfill {
			start = "backfill"
		}
		t.row(printable(c.Name), state(c.Name), "log", printable(c.Log.Lane), types, start, "-", setting(c.MaxFailures))
	}
	if err := t.close(); err != nil {
		return err
	}
	if len(list) > 0 {
		fmt.Fprintf(a.out, "registry version %d\n", version)
	}
	return nil
}

func (a *app) addConsumer(ctx context.Context, name string, o consumerOptions) error {
	c := a2redis.Consumer{Name: name, PerSession: o.perSession, MaxFailures: o.maxFailures}
	if o.logLane != "" {
		c.Log = &a2redis.LogSpec{Lane: o.logLane, Backfill: o.backfill}
		if o.types != "" {
			c.Log.Types = strings.Split(o.types, ",")
		}
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := a.store.AddConsumers(cctx, c); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "registered %s\n", printable(name))
	return nil
}

func (a *app) removeConsumer(ctx context.Context, name string, o consumerOptions) error {
	if !o.yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Remove consumer %q from the registry of prefix %q?", name, a.opts.prefix))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not removed: not confirmed (answer y, or pass --yes)")
		}
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if err := a.store.RemoveConsumers(cctx, name); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "removed %s\n", printable(name))
	return nil
}

type backfillJSON struct {
	Session string `json:"session"`
	Head    int64  `json:"head"`
}

type backfillDoneJSON struct {
	Sessions int `json:"sessions"`
	WithWork int `json:"with_work"`
}

// backfillConsumer wakes name's log cursor in every session, SCAN page by
// SCAN page: one WakeLog call per session, each bounded by the call
// timeout.
func (a *app) backfillConsumer(ctx context.Context, name string) error {
	cctx, cancel := a.call(ctx)
	list, _, err := a.store.ReadConsumers(cctx)
	cancel()
	if err != nil {
		return err
	}
	var consumer *a2redis.Consumer
	for i := range list {
		if list[i].Name == name {
			consumer = &list[i]
		}
	}
	switch {
	case consumer == nil:
		return fmt.Errorf("consumer %q is not registered under prefix %q (consumers add first)", name, a.opts.prefix)
	case consumer.Log == nil:
		return fmt.Errorf("consumer %q is not a typed log consumer: its heads come from the targets of appends, there is nothing to backfill", name)
	}
	var sessions, withWork int
	err = a.eachSessionPage(ctx, "", func(page []string) error {
		for _, session := range page {
			cctx, cancel := a.call(ctx)
			res, err := a.store.WakeLog(cctx, session, *consumer)
			cancel()
			if err != nil {
				return fmt.Errorf("session %q: %w", session, err)
			}
			sessions++
			if res.Cursor.Head > 0 {
				withWork++
				if a.opts.json {
					if err := writeLine(a.out, backfillJSON{Session: session, Head: res.Cursor.Head}); err != nil {
						return err
					}
				}
			}
		}
		fmt.Fprintf(a.env.Stderr, "\rbackfill %s: %d sessions, %d with work", name, sessions, withWork)
		return nil
	})
	fmt.Fprintln(a.env.Stderr)
	if err != nil {
		return err
	}
	if a.opts.json {
		return writeLine(a.out, backfillDoneJSON{Sessions: sessions, WithWork: withWork})
	}
	fmt.Fprintf(a.out, "backfilled %s over %s: %d with work to run\n", printable(name), plural(sessions, "session", "sessions"), withWork)
	return nil
}

func pauseCommand(resume bool) command {
	name, summary, details := "pause", "pause a consumer on the whole prefix: claims skip its heads, which wait (no failure counted)",
		`Pauses the registered consumer NAME for every store of the prefix (within
their ConsumerRefresh, 1s): claims skip its heads, which wait — nothing is
counted as failed, appends still give it heads, and heads already claimed
run to their end. resume undoes it.
JSON: {"consumer","paused"}.`
	if resume {
		name, summary, details = "resume", "resume a paused consumer and wake the workers (an announcement on every ready shard)",
			`Resumes the paused consumer NAME and announces on every shard of the ready
index that work may be claimable, so idle workers claim at once instead of
at their MaxWait. Resuming a consumer that is not paused changes nothing.
JSON: {"consumer","paused"}.`
	}
	return command{
		name:    name,
		args:    []string{"NAME"},
		summary: summary,
		details: details,
		need:    needData,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, args []string) error {
				cctx, cancel := a.call(ctx)
				defer cancel()
				var err error
				if resume {
					err = a.store.ResumeConsumer(cctx, args[0])
				} else {
					err = a.store.PauseConsumer(cctx, args[0])
				}
				if err != nil {
					return err
				}
				if a.opts.json {
					return writeLine(a.out, struct {
						Consumer string `json:"consumer"`
						Paused   bool   `json:"paused"`
					}{args[0], !resume})
				}
				fmt.Fprintf(a.out, "%sd %s\n", name, printable(args[0]))
				return nil
			}}
		},
	}
}
