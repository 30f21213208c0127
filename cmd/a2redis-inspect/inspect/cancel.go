package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

func cancelCommand() command {
	return command{
		name:    "cancel",
		args:    []string{"SESSION", "CONSUMER", "INDEX"},
		summary: "cancel a head that has not completed: skipped without running (writes)",
		details: `Cancels the consumer's head at INDEX through the store's Cancel: a head
that is free, held (a retry, a snooze or its scheduled time) or claimed by
a running attempt is skipped without running (again). Its cursor moves on
as if it had completed, the head is recorded as cancelled (not a dead
letter), and a running attempt's later completion is refused as
superseded (its returned events are not appended). A dead-lettered head is
left alone: use 'redrive --skip'. When the consumer has heads at INDEX on
several cursors, --lane picks one (--lane '' is its event cursor). It
first shows the head and asks for confirmation on the terminal ("[y/N]";
anything but y or yes declines and exits 1) unless --yes is given. A head
that is not there exits 1 without asking.
JSON: {"session","consumer","lane","index","outcome","attempts",
"has_pending"}.`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var o cancelOptions
			fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
			fs.BoolVar(&o.yes, "y", false, "short for --yes")
			fs.Var(&o.lane, "lane", "the `LANE` of the cursor whose head it is, when the consumer has several ('' for its event cursor)")
			return runner{
				check: func(args []string) error {
					return checkIndexArg(args[2])
				},
				run: func(ctx context.Context, a *app, args []string) error {
					index, _ := strconv.ParseInt(args[2], 10, 64)
					return a.cancel(ctx, args[0], args[1], index, o)
				},
			}
		},
	}
}

type cancelOptions struct {
	yes  bool
	lane optionalString
}

type cancelJSON struct {
	Session    string `json:"session"`
	Consumer   string `json:"consumer"`
	Lane       string `json:"lane"`
	Index      int64  `json:"index"`
	Outcome    string `json:"outcome"`
	Attempts   int64  `json:"attempts"`
	HasPending bool   `json:"has_pending"`
}

// errCancelDeclined: the operator did not confirm.
var errCancelDeclined = errors.New("not cancelled: not confirmed (answer y, or pass --yes)")

func (a *app) cancel(ctx context.Context, session, consumer string, index int64, o cancelOptions) error {
	cctx, done := a.call(ctx)
	cursors, err := a.store.Cursors(cctx, session)
	done()
	if err != nil {
		return err
	}
	var match []a2redis.Cursor
	for _, c := range cursors {
		if c.Consumer == consumer && c.Head == index && (!o.lane.set || c.Lane == o.lane.value) {
			match = append(match, c)
		}
	}
	switch {
	case len(match) == 0:
		return fmt.Errorf("consumer %s has no head at index %d in session %s (done already?): list them with '%s cursors %s'",
			strconv.Quote(consumer), index, strconv.Quote(session), name, shellQuote(session))
	case len(match) > 1:
		lanes := make([]string, len(match))
		for i, c := range match {
			lanes[i] = strconv.Quote(c.Lane)
		}
		sort.Strings(lanes)
		return usagef("consumer %s has heads at index %d on %d cursors: pick one with --lane (one of %s; \"\" is the event cursor)",
			strconv.Quote(consumer), index, len(match), strings.Join(lanes, ", "))
	}
	c := match[0]
	where := fmt.Sprintf("consumer %s", strconv.Quote(c.Consumer))
	if c.Lane != "" {
		where += fmt.Sprintf(" lane %s", strconv.Quote(c.Lane))
	}
	state := "never run"
	switch {
	case c.DeadLettered():
		return fmt.Errorf("the %s head of %s at index %d is dead-lettered: use '%s redrive %s %s %d --skip'",
			c.Kind, where, index, name, shellQuote(session), shellQuote(consumer), index)
	case c.Holder != "":
		state = fmt.Sprintf("claimed by %s, attempt %d", strconv.Quote(c.Holder), c.Attempts)
	case c.Attempts > 0:
		state = fmt.Sprintf("%d attempts, %s", c.Attempts, plural(int(c.Failures), "failure", "failures"))
	}
	if !o.yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Cancel the %s head of %s at index %d (%s) in session %s?", c.Kind, where, index, state, strconv.Quote(session)))
		if err != nil {
			return err
		}
		if !ok {
			return errCancelDeclined
		}
	}
	cctx, done = a.call(ctx)
	res, err := a.store.Cancel(cctx, redisstore.CancelRequest{Session: session, Consumer: consumer, Lane: c.Lane, Index: index})
	done()
	if err != nil {
		return err
	}
	if a.opts.json {
		if err := writeJSON(a.out, cancelJSON{Session: session, Consumer: consumer, Lane: c.Lane, Index: index, Outcome: string(res.Outcome), Attempts: res.Attempts, HasPending: res.HasPending}); err != nil {
			return err
		}
	}
	if res.Outcome != redisstore.Cancelled {
		return fmt.Errorf("nothing cancelled (%s): the head of %s at index %d changed meanwhile (someone else acted on it?)", res.Outcome, where, index)
	}
	if !a.opts.json {
		fmt.Fprintf(a.out, "cancelled: the %s head of %s at index %d (%s)\n", c.Kind, where, index, state)
	}
	return nil
}
