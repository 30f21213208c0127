package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
)

func repairSessionCommand() command {
	return command{
		name:    "repair-session",
		args:    []string{"SESSION"},
		summary: "mend a session an older release wedged (a log entry above its counter; writes, asks first)",
		details: `Mends a session that an older release's failed append left wedged: a log
entry above the session's counter, so that every append fails with "The ID
specified in XADD is equal or smaller than the target stream top item" and
reads stop at the counter. The entries above the counter were never
confirmed to their writer: they are removed (with their type-index entries
and free heads), the log is rebuilt up to the counter, and the writer's
batch can be sent again with its ids. It shows what it would remove and
asks for confirmation ("[y/N]") unless --yes is given; a session that is
not wedged is left alone. Its cost grows with the log (it copies it page
by page).
JSON: {"session","head","removed":[indexes],"copied"}.`,
		need: needSession,
		setup: func(fs *flag.FlagSet) runner {
			var yes bool
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
			fs.BoolVar(&yes, "y", false, "short for --yes")
			return runner{
				run: func(ctx context.Context, a *app, args []string) error { return a.repairSession(ctx, args[0], yes) },
			}
		},
	}
}

type repairJSON struct {
	Session string  `json:"session"`
	Head    int64   `json:"head"`
	Removed []int64 `json:"removed"`
	Copied  int     `json:"copied"`
}

var errRepairDeclined = errors.New("not repaired: not confirmed (answer y, or pass --yes)")

func (a *app) repairSession(ctx context.Context, session string, yes bool) error {
	if !yes {
		b, err := a.bounds(ctx, session)
		if err != nil {
			return err
		}
		ok, err := a.confirm(ctx, fmt.Sprintf("Remove every log entry above index %d (the session's counter) of session %s and rebuild its log?", b.Head, strconv.Quote(session)))
		if err != nil {
			return err
		}
		if !ok {
			return errRepairDeclined
		}
	}
	// The repair pages through the log: the per-call timeout bounds each
	// of its commands through the context only as a whole, so it gets the
	// run's context.
	r, err := a.store.RepairSession(ctx, session)
	if err != nil {
		return err
	}
	if a.opts.json {
		if r.Removed == nil {
			r.Removed = []int64{}
		}
		return writeJSON(a.out, repairJSON{Session: session, Head: r.Head, Removed: r.Removed, Copied: r.Copied})
	}
	if len(r.Removed) == 0 {
		fmt.Fprintf(a.out, "session %s is not wedged: its log ends at its counter (%d); nothing done\n", strconv.Quote(session), r.Head)
		return nil
	}
	fmt.Fprintf(a.out, "repaired session %s: removed %d log entries above index %d (%v), copied %d\n", strconv.Quote(session), len(r.Removed), r.Head, r.Removed, r.Copied)
	return nil
}
