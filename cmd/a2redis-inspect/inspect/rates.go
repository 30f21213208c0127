package inspect

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"
)

func ratesCommand() command {
	return command{
		name:     "rates",
		args:     []string{"CONSUMER"},
		optional: 1,
		summary:  "rate limits at work: each consumer's running window, its starts and when it ends",
		details: `Shows the prefix-wide rate limiter of each consumer (worker.RateLimit):
how many handler starts its running window has granted and how long until
it ends (Store.RateUsages: a GET and a PTTL per consumer, on the limiters'
slot). Without CONSUMER: every consumer of the registry. A
consumer with no rate limit, or whose window ended, shows no window. The
limit itself is the workers' configuration and is not stored.
Columns: CONSUMER, STARTS (granted in the running window), ENDS IN.
JSON: {"consumer","starts","ends_in_ms"}, one object per line.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, args []string) error { return a.rates(ctx, args) }}
		},
	}
}

type rateJSON struct {
	Consumer string `json:"consumer"`
	Starts   int    `json:"starts"`
	EndsInMS int64  `json:"ends_in_ms"`
}

func (a *app) rates(ctx context.Context, names []string) error {
	if len(names) == 0 {
		cctx, done := a.call(ctx)
		consumers, _, err := a.store.ReadConsumers(cctx)
		done()
		if err != nil {
			return err
		}
		for _, c := range consumers {
			names = append(names, c.Name)
		}
	}
	cctx, done := a.call(ctx)
	usages, err := a.store.RateUsages(cctx, names...)
	done()
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, u := range usages {
			if err := writeLine(a.out, rateJSON{Consumer: u.Consumer, Starts: u.Starts, EndsInMS: u.EndsIn.Milliseconds()}); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.out, fmt.Sprintf("no consumers registered under prefix %q (name one as the argument)", a.opts.prefix),
		"CONSUMER", "STARTS", "ENDS IN")
	for _, u := range usages {
		if u.EndsIn == 0 {
			t.row(printable(u.Consumer), "-", "no window")
			continue
		}
		t.row(printable(u.Consumer), strconv.Itoa(u.Starts), u.EndsIn.Round(time.Millisecond).String())
	}
	return t.close()
}
