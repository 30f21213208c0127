package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/a2redis/a2redis/redisstore"
)

func retentionCommand() command {
	return command{
		name:    "retention",
		summary: "list the sessions a retention pass would end, drop or trim (--apply runs one pass; asks first)",
		details: `Shows what a retention pass (redisstore.Store.Retention, what the worker
runtime runs with Config.Retention) would do to the prefix's sessions:
those idle for --idle (no append since, nothing to run, held or in flight,
and no dead letter) are ended (Clear + Reclaim: their clear marker stays)
or, with --drop, deleted whole (an ended session too). With
--trim-keep-last or --trim-older-than (--idle may then be left out) the
other sessions' handled past is trimmed (redisstore.Store.Trim): the
events every consumer is done with, beyond the newest N or older than D,
leave the log; it lists each session with the events a trim removes and
where its log would start. The pass scans the sessions from the start
(SCAN on every master), at most --scan keys, and names at most --limit
sessions. Without --apply it writes nothing (a dry run: the default);
with --apply it runs that pass, after confirmation ("[y/N]") unless
--yes.
JSON: {"scanned","idle":[sessions],"ended","dropped","changed","trimmed":
[{"session","floor","removed"}],"cursor"}.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			var o struct {
				idle           time.Duration
				drop, apply    bool
				yes            bool
				limit, scanned int
				keepLast       int
				olderThan      time.Duration
			}
			fs.DurationVar(&o.idle, "idle", 0, "a session is idle after `D` without an append (required unless trimming)")
			fs.IntVar(&o.keepLast, "trim-keep-last", 0, "trim other sessions' handled past, keeping the newest `N` events")
			fs.DurationVar(&o.olderThan, "trim-older-than", 0, "trim other sessions' handled events older than `D`")
			fs.BoolVar(&o.drop, "drop", false, "drop idle sessions (no key left) instead of ending them")
			fs.BoolVar(&o.apply, "apply", false, "run the pass (default: a dry run that writes nothing)")
			fs.IntVar(&o.limit, "limit", redisstore.DefaultRetentionSessions, "name (or act on) at most `N` sessions")
			fs.IntVar(&o.scanned, "scan", 20_000, "read at most `N` keys")
			fs.BoolVar(&o.yes, "yes", false, "with --apply: do not ask for confirmation")
			fs.BoolVar(&o.yes, "y", false, "short for --yes")
			return runner{
				check: func(args []string) error {
					if len(args) > 0 {
						return errors.New("retention takes no arguments")
					}
					trimming := o.keepLast > 0 || o.olderThan > 0
					if o.idle < 0 || (o.idle == 0 && !trimming) {
						return errors.New("--idle D is required (a positive duration, e.g. 720h), unless --trim-keep-last or --trim-older-than is given")
					}
					if o.keepLast < 0 || o.olderThan < 0 {
						return errors.New("--trim-keep-last and --trim-older-than must not be negative")
					}
					if o.limit <= 0 || o.scanned <= 0 {
						return errors.New("--limit and --scan must be positive")
					}
					return nil
				},
				run: func(ctx context.Context, a *app, _ []string) error {
					policy := redisstore.RetentionPolicy{IdleFor: o.idle, Drop: o.drop, MaxSessions: o.limit, MaxScan: o.scanned, DryRun: true}
					if o.keepLast > 0 || o.olderThan > 0 {
						policy.Trim = &redisstore.TrimRequest{KeepLast: o.keepLast, OlderThan: o.olderThan}
					}
					dry, err := a.store.Retention(ctx, policy, "")
					if err != nil {
						return err
					}
					if !o.apply {
						return a.showRetention(dry, o.drop, true)
					}
					if len(dry.Idle) == 0 && len(dry.Trimmed) == 0 {
						return a.showRetention(dry, o.drop, true)
					}
					if !o.yes {
						verb := "End"
						if o.drop {
							verb = "Drop"
						}
						ok, err := a.confirm(ctx, fmt.Sprintf("%s %d idle sessions and trim %d of prefix %q?", verb, len(dry.Idle), len(dry.Trimmed), a.opts.prefix))
						if err != nil {
							return err
						}
						if !ok {
							return errors.New("nothing done: not confirmed (answer y, or pass --yes)")
						}
					}
					policy.DryRun = false
					r, err := a.store.Retention(ctx, policy, "")
					if err != nil {
						return err
					}
					return a.showRetention(r, o.drop, false)
				},
			}
		},
	}
}

func (a *app) showRetention(r redisstore.RetentionResult, drop, dry bool) error {
	if a.opts.json {
		if r.Idle == nil {
			r.Idle = []string{}
		}
		return writeJSON(a.out, r)
	}
	verb := "end"
	if drop {
		verb = "drop"
	}
	trims := ""
	if len(r.Trimmed) > 0 {
		trims = fmt.Sprintf(" and trim %d", len(r.Trimmed))
	}
	if dry {
		fmt.Fprintf(a.out, "a pass would %s %d%s of %d sessions scanned (dry run: nothing written)\n", verb, len(r.Idle), trims, r.Scanned)
	} else {
		fmt.Fprintf(a.out, "ended %d, dropped %d, trimmed %d, left %d that changed meanwhile, of %d sessions scanned\n", r.Ended, r.Dropped, len(r.Trimmed), r.Changed, r.Scanned)
	}
	for _, s := range r.Idle {
		fmt.Fprintln(a.out, strconv.Quote(s))
	}
	for _, t := range r.Trimmed {
		fmt.Fprintf(a.out, "%s: trim %d events, the log starting at %d\n", strconv.Quote(t.Session), t.Removed, t.Floor+1)
	}
	if r.Cursor != "" {
		fmt.Fprintln(a.out, "(more sessions past the scanned keys: raise --scan, or let the worker's passes go on)")
	}
	return nil
}
