package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/wire"
)

// ClearOptions tune a Clear.
type ClearOptions struct {
	// IfLastIndex, when set, clears only while the session's head is that
	// index; a retry of the same conditional clear reports Cleared again.
	IfLastIndex *int64
	// Cause, when set, fences the clear like a caused append: it commits
	// only while that attempt owns its head (ErrSupersededAttempt).
	Cause *a2redis.Cause
}

// ClearResult is what a Clear did.
type ClearResult struct {
	// Cleared reports that the session is cleared (by this call, an
	// earlier one, or because it is empty); false when IfLastIndex did not
	// match.
	Cleared bool `json:"cleared"`
	// Index is the session head after the call.
	Index int64 `json:"index"`
	// ClearIndex is the latest clear marker after the call.
	ClearIndex int64 `json:"clear_index"`
}

// Clear ends the session's current lifetime: it appends a clear marker
// event (type a2redis.ClearEventType) and everything at or below it belongs
// to the past: no head survives, log cursors count from the marker, reads
// start at it, and its event ids are free again. Clearing an empty or
// already-cleared session is a successful no-op. The old entries stay until
// Reclaim deletes them.
func (s *Store) Clear(ctx context.Context, session string, opts ClearOptions) (ClearResult, error) {
	if err := checkSession(session); err != nil {
		return ClearResult{}, err
	}
	ifLast := ""
	if opts.IfLastIndex != nil {
		if *opts.IfLastIndex < 0 {
			return ClearResult{}, check.Invalid("IfLastIndex", "is negative (%d)", *opts.IfLastIndex)
		}
		ifLast = itoa(*opts.IfLastIndex)
	}
	causeConsumer, causeTag, causeIndex, causeAttempt := "", "", "", ""
	if c := opts.Cause; c != nil {
		if err := checkCause("Cause", *c); err != nil {
			return ClearResult{}, err
		}
		causeConsumer, causeTag, causeIndex, causeAttempt = c.Consumer, tagOf(c.Lane), itoa(c.Index), itoa(c.Attempt)
	}
	marker := s.cfg.IDs()
	now := s.now()
	reply, err := s.run(ctx, "clear", session, []string{itoa(now), ifLast, causeConsumer, causeTag, causeIndex, causeAttempt, marker})
	if err != nil {
		return ClearResult{}, err
	}
	return s.clearResult(ctx, session, opts, marker, now, reply)
}

func (s *Store) clearResult(ctx context.Context, session string, opts ClearOptions, marker string, now int64, reply []rueidis.RedisMessage) (ClearResult, error) {
	switch word(reply, 0) {
	case "ok":
		var r ClearResult
		var err error
		r.Cleared = word(reply, 1) == "1"
		if r.Index, err = number(reply, 2); err != nil {
			return ClearResult{}, err
		}
		if r.ClearIndex, err = number(reply, 3); err != nil {
			return ClearResult{}, err
		}
		switch {
		case word(reply, 4) == "1":
			s.publish(ctx, session, wire.Encode(r.Index, now, []wire.Entry{{
				Index: r.Index, ID: marker, Type: a2redis.ClearEventType, Payload: []byte("null"),
			}}))
		case r.Cleared && r.Index > 0:
			// An earlier try may have appended the marker without publishing.
			s.publish(ctx, session, wire.EncodeBare(r.Index))
		}
		return r, nil
	case "superseded":
		return ClearResult{}, &a2redis.SupersededError{Session: session, Cause: *opts.Cause}
	case "foreign":
		return ClearResult{}, errorf(a2redis.ErrPartialDuplicateBatch, session, "the clear marker id %q is already stored", marker)
	}
	return ClearResult{}, fmt.Errorf("%w: clear replied %v", a2redis.ErrUnexpectedReply, reply)
}

// ReclaimResult is what a reclaim deleted.
type ReclaimResult struct {
	// Deleted counts the log entries deleted.
	Deleted int64 `json:"deleted"`
	// Done reports that nothing of a past lifetime remains.
	Done bool `json:"done"`
}

// ReclaimPage deletes one page (ReclaimPageSize entries) of the session's
// past lifetimes: log entries below the clear marker and the event-id
// records naming them. Once none is left it sweeps what the past lifetimes
// left (head rows, type-index entries, checkpoints, pin counts, idle cursor
// records) and reports Done; a lifetime that ended empty collapses to its
// marker. The sweep of a big lifetime takes several script calls, each
// bounded (about 500 fields, keys or entries), which ReclaimPage makes one
// after the other; their progress is kept in Redis, so a call that ctx
// ends is taken up by the next. Safe to call repeatedly and concurrently.
func (s *Store) ReclaimPage(ctx context.Context, session string) (ReclaimResult, error) {
	if err := checkSession(session); err != nil {
		return ReclaimResult{}, err
	}
	return s.reclaimPage(ctx, session, ReclaimPageSize)
}

// reclaimPage is ReclaimPage with its page size.
func (s *Store) reclaimPage(ctx context.Context, session string, page int64) (ReclaimResult, error) {
	var r ReclaimResult
	for {
		reply, err := s.run(ctx, "reclaim", session, []string{itoa(page)})
		if err != nil {
			return r, err
		}
		deleted, err := number(reply, 0)
		if err != nil {
			return r, err
		}
		r.Deleted += deleted
		switch word(reply, 1) {
		case "1":
			if len(reply) > 2 {
				// Collapsed: its ready record went; the shard forgets it.
				if err := s.forgetReady(ctx, session, word(reply, 2)); err != nil {
					return r, err
				}
			}
			// The past is gone: the log may be small enough to rebuild again.
			s.bigLogs.forget(session)
			r.Done = true
			return r, nil
		case "0":
			return r, nil
		case "s":
			// The sweep goes on in the next call.
		default:
			return r, fmt.Errorf("%w: reclaim replied %v", a2redis.ErrUnexpectedReply, reply)
		}
	}
}

// Reclaim runs ReclaimPage until the session is done (or ctx ends), and
// returns the total deleted.
func (s *Store) Reclaim(ctx context.Context, session string) (ReclaimResult, error) {
	var total ReclaimResult
	for {
		r, err := s.ReclaimPage(ctx, session)
		total.Deleted += r.Deleted
		if err != nil {
			return total, err
		}
		if r.Done {
			total.Done = true
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
