package inspect

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/a2redis/a2redis"
)

func headCommand() command {
	return command{
		name:    "head",
		args:    []string{"SESSION", "CONSUMER", "INDEX"},
		summary: "one head of a consumer: waiting, claimed, held, dead, or how it was done (completed, skipped, cancelled)",
		details: `Shows what became of the consumer's head at INDEX. While its cursor still
stands on it: its state as 'cursors' shows it (ready, claimed, lapsed,
retry-wait, dead) with its attempts and failures. Once the cursor moved
past it: how, from the head's record (Store.HeadRecord): completed (by
which attempt, when), skipped (redrive --skip) or cancelled ('cancel';
when). A head the cursor has not reached yet, or that the session never
had, is 'not reached'. --lane names the lane cursor ('' or no flag: the
event or log cursor).
JSON: {"session","consumer","lane","index","state","attempt","at"} with
state one of the cursor states above, "completed", "skipped",
"cancelled" or "not-reached"; at is RFC 3339, omitted when unknown.`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var lane optionalString
			fs.Var(&lane, "lane", "the `LANE` of the consumer's lane cursor")
			return runner{
				check: func(args []string) error {
					return checkIndexArg(args[2])
				},
				run: func(ctx context.Context, a *app, args []string) error {
					index, _ := strconv.ParseInt(args[2], 10, 64)
					return a.head(ctx, args[0], args[1], lane.value, index)
				},
			}
		},
	}
}

type headJSON struct {
	Session  string `json:"session"`
	Consumer string `json:"consumer"`
	Lane     string `json:"lane"`
	Index    int64  `json:"index"`
	State    string `json:"state"`
	Attempt  int64  `json:"attempt"`
	At       string `json:"at,omitempty"`
}

func (a *app) head(ctx context.Context, session, consumer, lane string, index int64) error {
	cursors, now, gone, err := a.judgedCursors(ctx, session)
	if err != nil {
		return err
	}
	doc := headJSON{Session: session, Consumer: consumer, Lane: lane, Index: index, State: "not-reached"}
	var at time.Time
	var detail string
	onHead := false
	for _, c := range cursors {
		if c.Consumer != consumer || c.Lane != lane || c.Head != index {
			continue
		}
		onHead = true
		doc.State, doc.Attempt = cursorState(c, now, gone), c.Attempts
		detail = fmt.Sprintf("%s, %s", plural(int(c.Attempts), "attempt", "attempts"), plural(int(c.Failures), "failure", "failures"))
		if c.LastError != "" {
			detail += ", last error: " + c.LastError
		}
	}
	if !onHead {
		cctx, done := a.call(ctx)
		rec, err := a.store.HeadRecord(cctx, session, a2redis.HeadRef{Consumer: consumer, Lane: lane, Index: index})
		done()
		if err != nil {
			return err
		}
		switch {
		case rec.Cancelled():
			doc.State, at = "cancelled", rec.CancelledAt
		case rec.Done && rec.Attempt > 0:
			doc.State, doc.Attempt, at = "completed", rec.Attempt, rec.DoneAt
			detail = "by attempt " + strconv.FormatInt(rec.Attempt, 10)
		case rec.Done:
			doc.State, at = "skipped", rec.DoneAt
		}
	}
	if !at.IsZero() {
		doc.At = at.UTC().Format(time.RFC3339Nano)
	}
	if a.opts.json {
		return writeJSON(a.out, doc)
	}
	where := "consumer " + strconv.Quote(consumer)
	if lane != "" {
		where += " lane " + strconv.Quote(lane)
	}
	line := fmt.Sprintf("%s head %d of %s: %s", strconv.Quote(session), index, where, doc.State)
	if detail != "" {
		line += " (" + detail + ")"
	}
	if doc.At != "" {
		line += " at " + doc.At
	}
	fmt.Fprintln(a.out, line)
	return nil
}
