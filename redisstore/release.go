package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// ReleaseRequest gives claimed attempts of one session back.
type ReleaseRequest struct {
	// Session is the session id. Required.
	Session string
	// Attempts are the claimed attempts to give back (at most
	// Config.MaxBatch, no head named twice).
	Attempts []Attempt
	// Delay, when positive, keeps the heads from being claimed again until
	// now + Delay (a snooze); zero frees them at once.
	Delay time.Duration
}

// ReleaseOutcome tells what became of one released attempt.
type ReleaseOutcome string

// The release outcomes.
const (
	// Released: the claim was given back; no failure was counted, and the
	// head is claimable again (after the delay, if any).
	Released ReleaseOutcome = "released"
	// ReleaseSuperseded: the attempt no longer held its head (it was
	// completed, failed, dead-lettered, released or taken over); nothing
	// was written for it.
	ReleaseSuperseded ReleaseOutcome = "superseded"
)

// Release gives claimed attempts back without counting a failure, each
// fenced as a completion is, in one script call: for a worker that stops
// with heads in hand, and for a handler that asks to run again later
// (Delay). A released head's next claim is a new attempt that counts no
// failure for this one. The outcomes are in request order.
func (s *Store) Release(ctx context.Context, req ReleaseRequest) ([]ReleaseOutcome, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.release(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpRelease, Session: req.Session, Events: len(req.Attempts)})
	res, err := s.release(ctx, req)
	n := 0
	for _, r := range res {
		if r == Released {
			n++
		}
	}
	end(OperationEnd{Session: req.Session, Count: n, Err: err})
	return res, err
}

// release is Release without its observation.
func (s *Store) release(ctx context.Context, req ReleaseRequest) ([]ReleaseOutcome, error) {
	if err := checkSession(req.Session); err != nil {
		return nil, err
	}
	causes := CompleteAttemptsRequest{Attempts: req.Attempts}.causes()
	if err := check.Completions("Attempts", causes, s.cfg.MaxBatch); err != nil {
		return nil, err
	}
	if err := s.checkDeclaredCauses(ctx, "Attempts", causes); err != nil {
		return nil, err
	}
	if req.Delay < 0 {
		return nil, check.Invalid("Delay", "is negative (%v)", req.Delay)
	}
	if len(req.Attempts) == 0 {
		return []ReleaseOutcome{}, nil
	}
	now := s.now()
	until := ""
	if req.Delay > 0 {
		until = itoa(now + max(req.Delay.Milliseconds(), 1))
	}
	args := make([]string, 0, 3+4*len(req.Attempts))
	args = append(args, itoa(now), until, itoa(int64(len(req.Attempts))))
	for _, a := range req.Attempts {
		args = append(args, a.Head.Consumer, tagOf(a.Head.Lane), itoa(a.Head.Index), itoa(a.Attempt))
	}
	reply, err := s.run(ctx, "release", req.Session, args)
	if err != nil {
		return nil, err
	}
	if len(reply) != len(req.Attempts) {
		return nil, fmt.Errorf("%w: release replied %d outcomes for %d attempts", a2redis.ErrUnexpectedReply, len(reply), len(req.Attempts))
	}
	out := make([]ReleaseOutcome, len(reply))
	for i := range reply {
		switch w := word(reply, i); w {
		case "released", "superseded":
			out[i] = ReleaseOutcome(w)
		default:
			return nil, fmt.Errorf("%w: release replied %q", a2redis.ErrUnexpectedReply, w)
		}
	}
	return out, nil
}
