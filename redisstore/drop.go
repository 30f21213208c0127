package redisstore

import (
	"context"
	"fmt"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// DropSnapshotPage is how many reducers' snapshots (checkpoint and history)
// one step of a drop deletes.
const DropSnapshotPage = 64

// DropPageSize is how many log entries (and the id records naming them)
// one reclaim call of a drop deletes: a sixteenth of ReclaimPageSize, so
// that no call of a drop holds the server for long. Measured with
// A2REDIS_SCALE=1 TestDropAtScale on a session of 1,000,000 events with
// an id key each: 156 µs of the server's CPU per call on average (460 µs
// with pages of 64, whose calls went over 1 ms at the 99th percentile).
const DropPageSize = 16

// DropResult is what a Drop did.
type DropResult struct {
	// Dropped reports that the session has no key left and its shard of
	// the ready index no longer names it: the next append starts a fresh
	// session at index 1. False when an append committed while the drop
	// ran (see Drop).
	Dropped bool `json:"dropped"`
	// ClearIndex is the clear marker the drop ended the session with (0
	// for a session that never held an event).
	ClearIndex int64 `json:"clear_index"`
	// Index is the session's head after the drop: 0 when dropped, else the
	// head of the lifetime that began during the drop.
	Index int64 `json:"index"`
	// Deleted counts the log entries deleted.
	Deleted int64 `json:"deleted"`
}

// Drop deletes a session: every key it has (its log, id records, head
// rows, cursors, type indexes, snapshots and pins, presence, its ready
// record) and its entry and version in its shard of the ready index. No
// other prefix-wide key names a session.
//
// A drop is a Clear, then Reclaim, then the drop's own steps; each script
// call does a bounded amount, so a session of any size is dropped without
// holding the server. The clear is the point the drop takes effect: every
// head claimed before it is superseded (completing, failing or renewing
// its claim reports ErrSupersededAttempt), claims find nothing of the
// dropped events, and reads start after them. An append racing the drop
// ends either before the clear — its events are dropped with the rest —
// or after it: then the session holds a new lifetime (counting on from the
// marker, as after a Clear), the drop deletes nothing of it and reports
// Dropped false with the new head. An append after a drop that reported
// Dropped starts a fresh session at index 1.
//
// Drop is safe to repeat (a drop cut short by ctx is finished by the next)
// and to run concurrently with itself.
func (s *Store) Drop(ctx context.Context, session string) (DropResult, error) {
	if err := checkSession(session); err != nil {
		return DropResult{}, err
	}
	var r DropResult
	cleared, err := s.Clear(ctx, session, ClearOptions{})
	if err != nil {
		return r, err
	}
	r.ClearIndex = cleared.ClearIndex
	for {
		for done := false; !done; {
			reclaimed, err := s.reclaimPage(ctx, session, DropPageSize)
			r.Deleted += reclaimed.Deleted
			if err != nil {
				return r, err
			}
			if done = reclaimed.Done; !done {
				if err := ctx.Err(); err != nil {
					return r, err
				}
			}
		}
		args := []string{itoa(r.ClearIndex), itoa(DropSnapshotPage)}
		reply, err := s.run(ctx, "drop", session, args)
		for err == nil && word(reply, 0) == "more" {
			if err = ctx.Err(); err == nil {
				reply, err = s.run(ctx, "drop", session, args)
			}
		}
		if err != nil {
			return r, err
		}
		switch word(reply, 0) {
		case "reclaim":
			// A sweep a concurrent reclaim began, still under way.
			if err := ctx.Err(); err != nil {
				return r, err
			}
		case "fresh":
			r.Index, err = number(reply, 1)
			return r, err
		case "done":
			if err := s.forgetReady(ctx, session, word(reply, 1)); err != nil {
				return r, err
			}
			r.Dropped = true
			return r, nil
		default:
			return r, fmt.Errorf("%w: drop replied %v", a2redis.ErrUnexpectedReply, reply)
		}
	}
}

// forgetReady removes a dropped session's entry and version from its shard
// of the ready index, unless a newer update (a fresh session's) came.
func (s *Store) forgetReady(ctx context.Context, session, version string) error {
	shard := keys.ReadyShard(session, s.cfg.ReadyShards)
	r := keys.ReadyFor(s.cfg.Prefix, shard)
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return err
	}
	script := scripts.All()["ready_forget"]
	err = s.retrying(ctx, true, func(ctx context.Context) error {
		return script.Lua(locking).Exec(ctx, s.client, []string{r.Index(), r.Sentinel()}, []string{session, version}).Error()
	})
	if err != nil {
		return fmt.Errorf("a2redis: forgetting session %q in ready index shard %d: %w", session, shard, err)
	}
	return nil
}
