package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/a2redis/a2redis/redisstore"
)

func dropCommand() command {
	return command{
		name:    "drop",
		args:    []string{"SESSION"},
		summary: "delete a session and everything it holds (writes)",
		details: `Deletes the session through the store's Drop: every key of the session
(its log, event-id records, head rows, cursors, type indexes, snapshots,
pins, presence, its ready record) and its entry and version in the ready
index, in bounded steps. It first shows the session's head and asks for
confirmation on the terminal ("[y/N]"; anything but y or yes declines and
exits 1) unless --yes is given. An append that commits while the drop runs
starts a new lifetime that the drop keeps: then it reports the new head
and exits 1.
JSON: {"session","dropped","clear_index","index","deleted"}.`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var yes bool
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
			fs.BoolVar(&yes, "y", false, "short for --yes")
			return runner{
				run: func(ctx context.Context, a *app, args []string) error {
					return a.drop(ctx, args[0], yes)
				},
			}
		},
	}
}

var errDropDeclined = errors.New("not dropped: not confirmed (answer y, or pass --yes)")

// dropJSON is the JSON output of drop.
type dropJSON struct {
	Session string `json:"session"`
	redisstore.DropResult
}

func (a *app) drop(ctx context.Context, session string, yes bool) error {
	cctx, cancel := a.call(ctx)
	b, err := a.store.Bounds(cctx, session)
	cancel()
	if err != nil {
		return err
	}
	if !yes {
		ok, err := a.confirm(ctx, fmt.Sprintf("Drop session %s (head %d, cleared at %d) and everything it holds?", strconv.Quote(session), b.Head, b.ClearIndex))
		if err != nil {
			return err
		}
		if !ok {
			return errDropDeclined
		}
	}
	// The drop's steps are many bounded calls: ctx, not one call's timeout.
	res, err := a.store.Drop(ctx, session)
	if err != nil {
		return err
	}
	if a.opts.json {
		if err := writeJSON(a.out, dropJSON{Session: session, DropResult: res}); err != nil {
			return err
		}
	}
	if !res.Dropped {
		return fmt.Errorf("session %s holds a new lifetime (head %d) appended while the drop ran: its past up to %d is deleted, the new events are kept", strconv.Quote(session), res.Index, res.ClearIndex)
	}
	if !a.opts.json {
		fmt.Fprintf(a.out, "dropped: session %s (%d log entries deleted)\n", strconv.Quote(session), res.Deleted)
	}
	return nil
}
