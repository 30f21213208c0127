package inspect

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

func redriveCommand() command {
	return command{
		name:     "redrive",
		args:     []string{"SESSION", "CONSUMER", "INDEX"},
		optional: 3,
		argsText: "SESSION CONSUMER INDEX|SESSION --all|--all-sessions",
		summary:  "retry or skip a dead-lettered head, --all of a session's, or those of --all-sessions (writes)",
		details: `Acts on the consumer's dead-lettered head at INDEX through the store's
Redrive: --retry clears its failures and makes it runnable again, --skip
moves the cursor past it. When the consumer has dead-lettered heads at
INDEX on several cursors, --lane picks one (--lane '' is its event
cursor). It first shows the head and asks for
confirmation on the terminal ("[y/N]"; anything but y or yes declines and
exits 1) unless --yes is given. A head that is not dead-lettered exits 1
without asking.
With --all (and only SESSION), every dead-lettered head of the session is
redriven, or only those of --consumer C and/or --lane L: the dead letters
are counted page by page, the count is confirmed (unless --yes), then each
head is redriven with its own Redrive call, page by page (heads
dead-lettered after the count are left alone). A table of what was done
streams out, then a summary line; it exits 1 when some head was no longer
dead-lettered (someone else acted on it).
With --all-sessions (and no SESSION) and --consumer C, consumer C's dead
letters in every session (from the store's dead index; --error TEXT keeps
those whose last error contains TEXT) are counted, the count is confirmed
(unless --yes), then redriven in batches of 100 (the store's
RedriveAcross), each head with its own Redrive call; heads dead-lettered
after the count are left alone. On a terminal a progress line on stderr
follows the batches; a summary line ends the run. An interrupted run
(Ctrl-C, an error) prints the --resume TOKEN that goes on from the last
batch done. It exits 1 when some head was no longer dead-lettered.
JSON: {"session","consumer","lane","index","action","redriven",
"has_pending"}; with --all one such object per line; with --all-sessions
one progress object per batch, {"redriven","missed","total","next",
"done"} (NDJSON; next resumes the run with --resume).`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var o redriveOptions
			fs.BoolVar(&o.retry, "retry", false, "clear the head's failures and make it runnable again")
			fs.BoolVar(&o.skip, "skip", false, "move the cursor past the head")
			fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
			fs.BoolVar(&o.yes, "y", false, "short for --yes")
			fs.Var(&o.lane, "lane", "the `LANE` of the cursor whose head it is, when the consumer has several ('' for its event cursor); with --all, only that lane's")
			fs.BoolVar(&o.all, "all", false, "redrive every dead-lettered head of SESSION (filtered by --consumer and --lane)")
			fs.Var(&o.consumer, "consumer", "with --all, only the heads of consumer `C`; with --all-sessions, required")
			fs.BoolVar(&o.allSessions, "all-sessions", false, "redrive the dead letters of --consumer in every session (no SESSION)")
			fs.Var(&o.errText, "error", "with --all-sessions, only the heads whose last error contains `TEXT`")
			fs.StringVar(&o.resume, "resume", "", "with --all-sessions, go on from the `TOKEN` an interrupted run printed")
			return runner{
				check: func(args []string) error {
					if o.retry == o.skip {
						return errors.New("redrive needs exactly one of --retry and --skip")
					}
					if o.allSessions {
						switch {
						case o.all:
							return errors.New("--all redrives one session, --all-sessions every session: pick one")
						case len(args) != 0:
							return errors.New("redrive --all-sessions takes no SESSION (filter with --consumer and --error)")
						case !o.consumer.set || o.consumer.value == "":
							return errors.New("redrive --all-sessions needs --consumer C")
						case o.lane.set:
							return errors.New("--lane filters --all, not --all-sessions")
						}
						return nil
					}
					if o.errText.set || o.resume != "" {
						return errors.New("--error and --resume go with --all-sessions")
					}
					if o.all {
						if len(args) != 1 {
							return errors.New("redrive --all takes only SESSION (filter with --consumer and --lane)")
						}
						if o.consumer.set && o.consumer.value == "" {
							return errors.New("--consumer is empty")
						}
						return nil
					}
					if len(args) != 3 {
						return errors.New("redrive takes SESSION CONSUMER INDEX, or SESSION --all")
					}
					if o.consumer.set {
						return errors.New("--consumer filters --all; name the consumer as the second argument")
					}
					return checkIndexArg(args[2])
				},
				run: func(ctx context.Context, a *app, args []string) error {
					action := redisstore.Retry
					if o.skip {
						action = redisstore.Skip
					}
					if o.allSessions {
						return a.redriveAllSessions(ctx, action, o)
					}
					if o.all {
						return a.redriveAll(ctx, args[0], action, o)
					}
					index, _ := strconv.ParseInt(args[2], 10, 64)
					return a.redrive(ctx, args[0], args[1], index, action, o)
				},
			}
		},
	}
}

type redriveOptions struct {
	retry, skip, yes, all, allSessions bool
	lane, consumer, errText            optionalString
	resume                             string
}

// optionalString is a string flag that knows whether it was given.
type optionalString struct {
	value string
	set   bool
}

// String implements flag.Value.
func (o *optionalString) String() string { return o.value }

// Set implements flag.Value.
func (o *optionalString) Set(v string) error {
	o.value, o.set = v, true
	return nil
}

type redriveJSON struct {
	Session    string `json:"session"`
	Consumer   string `json:"consumer"`
	Lane       string `json:"lane"`
	Index      int64  `json:"index"`
	Action     string `json:"action"`
	Redriven   bool   `json:"redriven"`
	HasPending bool   `json:"has_pending"`
}

// errDeclined: the operator did not confirm.
var errDeclined = errors.New("not redriven: not confirmed (answer y, or pass --yes)")

func (a *app) redrive(ctx context.Context, session, consumer string, index int64, action redisstore.RedriveAction, o redriveOptions) error {
	match, err := a.deadLetters(ctx, session, func(h a2redis.HeadEvent) bool {
		return h.Consumer == consumer && h.Index == index && (!o.lane.set || h.Lane == o.lane.value)
	})
	if err != nil {
		return err
	}
	switch {
	case len(match) == 0:
		on := ""
		if o.lane.set {
			on = " on lane " + strconv.Quote(o.lane.value)
		}
		return fmt.Errorf("consumer %s has no dead-lettered head at index %d%s in session %s: list them with '%s dead %s'",
			strconv.Quote(consumer), index, on, strconv.Quote(session), name, shellQuote(session))
	case len(match) > 1:
		lanes := make([]string, len(match))
		for i, h := range match {
			lanes[i] = strconv.Quote(h.Lane)
		}
		sort.Strings(lanes)
		return usagef("consumer %s has dead-lettered heads at index %d on %d cursors: pick one with --lane (one of %s; \"\" is the event cursor)",
			strconv.Quote(consumer), index, len(match), strings.Join(lanes, ", "))
	}
	head := match[0]
	if !o.yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Redrive (%s) %s in session %s?", action, describeHead(head), strconv.Quote(session)))
		if err != nil {
			return err
		}
		if !ok {
			return errDeclined
		}
	}
	cctx, cancel := a.call(ctx)
	res, err := a.store.Redrive(cctx, redisstore.RedriveRequest{Session: session, Consumer: consumer, Lane: head.Lane, Index: index, Action: action})
	cancel()
	if err != nil {
		return err
	}
	if a.opts.json {
		if err := writeJSON(a.out, redriveJSON{Session: session, Consumer: consumer, Lane: head.Lane, Index: index, Action: string(action), Redriven: res.Redriven, HasPending: res.HasPending}); err != nil {
			return err
		}
	}
	if !res.Redriven {
		return fmt.Errorf("nothing redriven: the head of consumer %s at index %d is no longer dead-lettered (someone else acted on it?)", strconv.Quote(consumer), index)
	}
	if !a.opts.json {
		verb := "made runnable again"
		if action == redisstore.Skip {
			verb = "skipped"
		}
		fmt.Fprintf(a.out, "redriven: %s %s\n", describeHead(head), verb)
	}
	return nil
}

func describeHead(h a2redis.HeadEvent) string {
	where := fmt.Sprintf("consumer %s", strconv.Quote(h.Consumer))
	if h.Lane != "" {
		where += fmt.Sprintf(" lane %s", strconv.Quote(h.Lane))
	}
	return fmt.Sprintf("the dead-lettered %s head of %s at index %d (type %s, %s, last error %s)",
		h.Kind, where, h.Index, strconv.Quote(h.Type), plural(int(h.Failures), "failure", "failures"), strconv.Quote(truncate(h.LastError, errorWidth)))
}

// confirm asks question on stderr and reads the answer from stdin; only "y"
// or "yes" (any case) is yes. Ctrl-C while waiting interrupts.
func (a *app) confirm(ctx context.Context, question string) (bool, error) {
	fmt.Fprintf(a.env.Stderr, "%s [y/N] ", cell(question))
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(a.env.Stdin).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(a.env.Stderr)
		return false, errInterrupted
	case line := <-answer:
		if !isTerminal(a.env.Stdin) {
			// Nothing echoed the answer: show it, and end the prompt's line.
			fmt.Fprintln(a.env.Stderr, cell(strings.TrimSpace(line)))
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return true, nil
		}
		return false, nil
	}
}

// isTerminal reports whether r is a terminal (which echoes what is typed).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// redriveAll redrives every dead-lettered head of the session that the
// filters keep: a counting pass, the confirmation, then a pass that
// redrives page by page, one Redrive call per head.
func (a *app) redriveAll(ctx context.Context, session string, action redisstore.RedriveAction, o redriveOptions) error {
	cutoff := a.env.Now()
	keep := func(h a2redis.HeadEvent) bool {
		return (!o.consumer.set || h.Consumer == o.consumer.value) && (!o.lane.set || h.Lane == o.lane.value) && !h.DeadLetteredAt.After(cutoff)
	}
	var filters []string
	if o.consumer.set {
		filters = append(filters, "consumer "+strconv.Quote(o.consumer.value))
	}
	if o.lane.set {
		filters = append(filters, "lane "+strconv.Quote(o.lane.value))
	}
	of := ""
	if len(filters) > 0 {
		of = " of " + strings.Join(filters, " and ")
	}
	total := 0
	if err := a.eachDeadLetterPage(ctx, session, func(page []a2redis.HeadEvent) error {
		for _, h := range page {
			if keep(h) {
				total++
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if total == 0 {
		return fmt.Errorf("no dead-lettered heads%s in session %s: list them with '%s dead %s'", of, strconv.Quote(session), name, shellQuote(session))
	}
	if !o.yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Redrive (%s) %s%s in session %s?", action, plural(total, "dead-lettered head", "dead-lettered heads"), of, strconv.Quote(session)))
		if err != nil {
			return err
		}
		if !ok {
			return errDeclined
		}
	}
	t := newTable(a.out, "", "CONSUMER", "KIND", "LANE", "INDEX", "TYPE", "FAILURES", "REDRIVEN", "LAST_ERROR")
	done, missed := 0, 0
	err := a.eachDeadLetterPage(ctx, session, func(page []a2redis.HeadEvent) error {
		for _, h := range page {
			if !keep(h) {
				continue
			}
			cctx, cancel := a.call(ctx)
			res, err := a.store.Redrive(cctx, redisstore.RedriveRequest{Session: session, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index, Action: action})
			cancel()
			if err != nil {
				return err
			}
			if res.Redriven {
				done++
			} else {
				missed++
			}
			if a.opts.json {
				if err := writeLine(a.out, redriveJSON{Session: session, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index, Action: string(action), Redriven: res.Redriven, HasPending: res.HasPending}); err != nil {
					return err
				}
				continue
			}
			t.row(h.Consumer, string(h.Kind), h.Lane, itoa(h.Index), h.Type, itoa(h.Failures), yesNo(res.Redriven), truncate(h.LastError, errorWidth))
		}
		return a.flushRows(t)
	})
	if err := t.close(); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	if !a.opts.json {
		verb := "made runnable again"
		if action == redisstore.Skip {
			verb = "skipped"
		}
		fmt.Fprintf(a.out, "redriven: %s%s in session %s %s\n", plural(done, "dead-lettered head", "dead-lettered heads"), of, strconv.Quote(session), verb)
	}
	if missed > 0 {
		return fmt.Errorf("%s no longer dead-lettered (someone else acted on them?)", plural(missed, "head was", "heads were"))
	}
	return nil
}
