package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The dead letters across sessions: `dead --all` and `redrive
// --all-sessions`, both from the store's dead index (DeadLettersAcross,
// RedriveAcross), page by page, each page a call of its own bounded by
// --timeout.

// eachDeadLetterAcross hands fn the dead letters of q across sessions,
// page by page.
func (a *app) eachDeadLetterAcross(ctx context.Context, q redisstore.DeadLetterQuery, fn func([]a2redis.HeadEvent) error) error {
	q.Limit = a.pageLimit()
	for {
		cctx, cancel := a.call(ctx)
		page, err := a.store.DeadLettersAcross(cctx, q)
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
		if err := ctx.Err(); err != nil {
			return errInterrupted
		}
		q.After = page.Next
	}
}

// filterText describes a consumer and error filter ("" for none), as " of
// consumer "c" with "text" in the last error".
func filterText(consumer, errText optionalString) string {
	var parts []string
	if consumer.set {
		parts = append(parts, "consumer "+strconv.Quote(consumer.value))
	}
	if errText.set {
		parts = append(parts, strconv.Quote(errText.value)+" in the last error")
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		if consumer.set {
			return " of " + parts[0]
		}
		return " with " + parts[0]
	}
	return " of " + parts[0] + " with " + parts[1]
}

func (a *app) deadAll(ctx context.Context, o deadOptions) error {
	q := redisstore.DeadLetterQuery{Consumer: o.consumer.value, Error: o.errText.value}
	of := filterText(o.consumer, o.errText)
	t := newTable(a.out, "no dead-lettered heads"+of+" in any session",
		"SESSION", "CONSUMER", "KIND", "LANE", "INDEX", "TYPE", "ATTEMPTS", "FAILURES", "DEAD_LETTERED", "LAST_ERROR")
	n, sessions, last := 0, 0, ""
	var first a2redis.HeadEvent
	err := a.eachDeadLetterAcross(ctx, q, func(page []a2redis.HeadEvent) error {
		for _, h := range page {
			if n == 0 {
				first = h
			}
			n++
			if h.Session != last {
				sessions++
				last = h.Session
			}
			if a.opts.json {
				if err := writeLine(a.out, toDeadJSON(h)); err != nil {
					return err
				}
				continue
			}
			t.row(h.Session, h.Consumer, string(h.Kind), h.Lane, itoa(h.Index), h.Type, itoa(h.Attempts), itoa(h.Failures), formatTime(h.DeadLetteredAt), h.LastError)
		}
		if a.opts.json {
			return a.out.Flush()
		}
		return a.flushRows(t)
	})
	if !a.opts.json {
		if err := t.close(); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if n > 0 {
		a.hint("%s%s in %s", plural(n, "dead letter", "dead letters"), of, plural(sessions, "session", "sessions"))
		if o.consumer.set {
			a.hint("redrive them with: %s redrive --all-sessions --consumer %s --retry   (or --skip to move past them)", name, shellQuote(o.consumer.value))
		} else {
			a.hint("redrive one consumer's with: %s redrive --all-sessions --consumer %s --retry   (or --skip)", name, shellQuote(first.Consumer))
		}
	}
	return nil
}

// redriveProgressJSON is one batch's progress in `redrive --all-sessions
// --json`.
type redriveProgressJSON struct {
	Redriven int    `json:"redriven"`
	Missed   int    `json:"missed"`
	Total    int    `json:"total"`
	Next     string `json:"next"`
	Done     bool   `json:"done"`
}

// errBatchDone stops RedriveAcross after one batch: each batch is a call of
// its own, bounded by --timeout.
var errBatchDone = errors.New("batch done")

// writerIsTerminal reports whether w is a terminal.
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (a *app) redriveAllSessions(ctx context.Context, action redisstore.RedriveAction, o redriveOptions) error {
	of := filterText(o.consumer, o.errText)
	cutoff := a.env.Now()
	// The count, from where a resumed run goes on.
	total, sessions, last := 0, 0, ""
	q := redisstore.DeadLetterQuery{Consumer: o.consumer.value, Error: o.errText.value, After: o.resume}
	if err := a.eachDeadLetterAcross(ctx, q, func(page []a2redis.HeadEvent) error {
		for _, h := range page {
			if h.DeadLetteredAt.After(cutoff) {
				continue
			}
			total++
			if h.Session != last {
				sessions++
				last = h.Session
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if total == 0 {
		return fmt.Errorf("no dead-lettered heads%s in any session: list them with '%s dead --all'", of, name)
	}
	if !o.yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Redrive (%s) %s%s in %s?", action, plural(total, "dead-lettered head", "dead-lettered heads"), of, plural(sessions, "session", "sessions")))
		if err != nil {
			return err
		}
		if !ok {
			return errDeclined
		}
	}
	progressLine := !a.opts.json && writerIsTerminal(a.env.Stderr)
	var done redisstore.RedriveProgress
	next := o.resume
	for {
		var batch redisstore.RedriveProgress
		cctx, cancel := a.call(ctx)
		_, err := a.store.RedriveAcross(cctx, redisstore.RedriveAcrossRequest{
			Consumer: o.consumer.value, Error: o.errText.value, Action: action, Before: cutoff,
			After: next, Batch: a.pageLimit(),
			Progress: func(p redisstore.RedriveProgress) error {
				batch = p
				return errBatchDone
			},
		})
		cancel()
		if err != nil && !errors.Is(err, errBatchDone) {
			if next != "" {
				a.errorf("resume with: %s redrive --all-sessions --consumer %s%s --%s --resume %s", name, shellQuote(o.consumer.value), errorFlag(o.errText), action, next)
			}
			if ctx.Err() != nil {
				return errInterrupted
			}
			return err
		}
		done.Redriven += batch.Redriven
		done.Missed += batch.Missed
		done.Done = batch.Done
		next = batch.Next
		switch {
		case a.opts.json:
			if err := writeLine(a.out, redriveProgressJSON{Redriven: done.Redriven, Missed: done.Missed, Total: total, Next: next, Done: done.Done}); err != nil {
				return err
			}
			if err := a.out.Flush(); err != nil {
				return err
			}
		case progressLine:
			fmt.Fprintf(a.env.Stderr, "\r%s %d/%d dead-lettered heads", progressBar(done.Redriven+done.Missed, total, 30), done.Redriven+done.Missed, total)
		}
		if done.Done {
			break
		}
		if ctx.Err() != nil {
			if progressLine {
				fmt.Fprintln(a.env.Stderr)
			}
			a.errorf("resume with: %s redrive --all-sessions --consumer %s%s --%s --resume %s", name, shellQuote(o.consumer.value), errorFlag(o.errText), action, next)
			return errInterrupted
		}
	}
	if progressLine {
		fmt.Fprintln(a.env.Stderr)
	}
	if !a.opts.json {
		verb := "made runnable again"
		if action == redisstore.Skip {
			verb = "skipped"
		}
		fmt.Fprintf(a.out, "redriven: %s%s in %s %s\n", plural(done.Redriven, "dead-lettered head", "dead-lettered heads"), of, plural(sessions, "session", "sessions"), verb)
	}
	if done.Missed > 0 {
		return fmt.Errorf("%s no longer dead-lettered (someone else acted on them?)", plural(done.Missed, "head was", "heads were"))
	}
	return nil
}

// errorFlag is the --error flag of a resume command ("" without one).
func errorFlag(errText optionalString) string {
	if !errText.set {
		return ""
	}
	return " --error " + shellQuote(errText.value)
}

// progressBar draws done of total in width cells.
func progressBar(done, total, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	filled := min(width, done*width/total)
	return "[" + strings.Repeat("#", filled) + strings.Repeat(" ", width-filled) + "]"
}
