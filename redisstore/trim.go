package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/rows"
)

// TrimPageSize is how many log entries (with the id records naming them
// and their type-index entries) one trim call removes.
const TrimPageSize = 250

// TrimRequest says how much of a session's handled past a Trim removes.
// Every bound given applies; with none, everything that may go goes.
// Whatever it asks, a trim removes only what every consumer is done with:
// events below the lowest head any consumer holds (free, claimed, held
// for a retry or dead-lettered), below every log consumer's position, and
// up to the newest snapshot of every reducer of the session.
type TrimRequest struct {
	// Through is the highest index to remove; 0 for no such bound.
	Through int64
	// KeepLast keeps at least the newest KeepLast events of the session.
	KeepLast int
	// OlderThan removes only events appended longer than OlderThan ago.
	OlderThan time.Duration
	// DryRun reports what the trim would remove (TrimResult.Floor and
	// Removed as if it had), writing nothing.
	DryRun bool
}

// TrimResult is what a Trim did.
type TrimResult struct {
	// Floor is the highest index trimmed: the retained log starts right
	// after it (Bounds.Floor). 0 when nothing was ever trimmed.
	Floor int64 `json:"floor"`
	// Removed counts the log entries this Trim removed (with DryRun:
	// would remove).
	Removed int64 `json:"removed"`
	// Bound is how far a trim could go when the last call ran: the
	// lowest index a consumer still needs, less one.
	Bound int64 `json:"bound"`
}

func (r TrimRequest) check() error {
	if r.Through < 0 {
		return check.Invalid("Through", "is negative (%d)", r.Through)
	}
	if r.KeepLast < 0 {
		return check.Invalid("KeepLast", "is negative (%d)", r.KeepLast)
	}
	if r.OlderThan < 0 {
		return check.Invalid("OlderThan", "is negative (%v)", r.OlderThan)
	}
	return nil
}

// Trim removes the oldest events of a session's current lifetime that
// every consumer is done with (see TrimRequest), with what names them: id
// records (an id trimmed is free again: sending it later appends a new
// event, so the trim bounds how long a retried append is recognised),
// type-index entries and head rows. Indexes do not move: the next append
// takes the next index, and reads start after the floor (Bounds.Floor;
// a read from inside the trimmed past fails with a2redis.ErrTrimmed). A
// log consumer added later with Backfill starts at the retained log. Each
// script call removes at most TrimPageSize entries, so a trim of any size
// never holds the server; Trim loops until done or ctx ends, and is safe to
// repeat and to run beside appends, claims and completions.
func (s *Store) Trim(ctx context.Context, session string, req TrimRequest) (TrimResult, error) {
	if err := checkSession(session); err != nil {
		return TrimResult{}, err
	}
	if err := req.check(); err != nil {
		return TrimResult{}, err
	}
	through := int64(1<<53 - 1)
	if req.Through > 0 {
		through = req.Through
	}
	if req.KeepLast > 0 {
		b, err := s.Bounds(ctx, session)
		if err != nil {
			return TrimResult{}, err
		}
		through = min(through, b.Head-int64(req.KeepLast))
	}
	created := ""
	if req.OlderThan > 0 {
		created = itoa(s.now() - req.OlderThan.Milliseconds())
	}
	// The log consumers the store knows bound the trim by their positions.
	var logs [][2]any
	for _, c := range s.registered(ctx) {
		if c.Log != nil {
			backfill := 0
			if c.Log.Backfill {
				backfill = 1
			}
			logs = append(logs, [2]any{rows.LogCursorID(c.Name, c.Log.Lane), backfill})
		}
	}
	if logs == nil {
		logs = [][2]any{}
	}
	logArg, err := json.Marshal(logs)
	if err != nil {
		return TrimResult{}, err
	}
	var out TrimResult
	for {
		dry := ""
		if req.DryRun {
			dry = itoa(out.Floor)
		}
		reply, err := s.run(ctx, "trim", session, []string{itoa(through), created, itoa(TrimPageSize), string(logArg), dry})
		if err != nil {
			return out, err
		}
		var more int64
		for i, v := range []*int64{&out.Floor, nil, &more, &out.Bound} {
			n, err := number(reply, i)
			if err != nil {
				return out, fmt.Errorf("%w: trim replied %v", a2redis.ErrUnexpectedReply, reply)
			}
			if v == nil {
				out.Removed += n
			} else {
				*v = n
			}
		}
		if more == 0 {
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
}
