package inspect

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// overdueAfter is how long past its next tick a schedule is shown overdue.
const overdueAfter = time.Minute

func schedulesCommand() command {
	return command{
		name:    "schedules",
		summary: "list the prefix's periodic producers (package schedule): spec, session, next and last tick",
		details: `Lists the schedules processes of the prefix run (schedule.Runner): each
appends one event per tick to its session, exactly once across processes.
Read from the schedule listing (one HSCAN page and two ZMSCOREs per 100
schedules), sorted by name.
Columns: NAME, SPEC (cron, or every <interval>), SESSION, TYPE, NEXT (the
next tick; "overdue" when it passed over a minute ago with no process
storing it), LAST (the newest tick a process stored), BY (the process that
wrote the record last), SEEN (age of that write).
JSON: {"name","spec","session","type","next","last","by","seen"}, one
object per line.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, _ []string) error { return a.schedules(ctx) }}
		},
	}
}

type scheduleJSON struct {
	Name    string   `json:"name"`
	Spec    string   `json:"spec"`
	Session string   `json:"session"`
	Type    string   `json:"type"`
	Next    jsonTime `json:"next"`
	Last    jsonTime `json:"last"`
	By      string   `json:"by"`
	Seen    jsonTime `json:"seen"`
}

func (a *app) schedules(ctx context.Context) error {
	cctx, cancel := a.call(ctx)
	list, err := a.store.Schedules(cctx)
	cancel()
	if err != nil {
		return err
	}
	if a.opts.json {
		for _, s := range list {
			if err := writeLine(a.out, scheduleJSON{Name: s.Name, Spec: s.Spec, Session: s.Session, Type: s.Type,
				Next: jsonTime(s.Next), Last: jsonTime(s.Last), By: s.By, Seen: jsonTime(s.Seen)}); err != nil {
				return err
			}
		}
		return nil
	}
	now := a.env.Now()
	t := newTable(a.out, fmt.Sprintf("no schedules under prefix %q", a.opts.prefix),
		"NAME", "SPEC", "SESSION", "TYPE", "NEXT", "LAST", "BY", "SEEN")
	for _, s := range list {
		next := formatTime(s.Next)
		if !s.Next.IsZero() && now.Sub(s.Next) > overdueAfter {
			next += " (overdue)"
		}
		last := "-"
		if !s.Last.IsZero() {
			last = formatTime(s.Last)
		}
		t.row(printable(s.Name), printable(s.Spec), printable(s.Session), printable(s.Type), next, last, printable(s.By), age(s.Seen, now)+" ago")
	}
	return t.close()
}
