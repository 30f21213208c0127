package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// FailRequest reports a failed attempt.
type FailRequest struct {
	// Session is the session id. Required.
	Session string
	// Head names the head.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
	// Error is the failure's text, recorded on the head.
	Error string
	// MaxFailures dead-letters the head once its failures reach it, for a
	// consumer whose registry entry sets no a2redis.Consumer.MaxFailures
	// (the entry's wins); zero means DefaultMaxFailures. With a RetryAfter
	// that grows with the failures, a passing outage is ridden out and a
	// poison event stops within minutes.
	MaxFailures int
	// Permanent dead-letters the head at this failure, whatever its count
	// (a failure that no retry can mend).
	Permanent bool
	// RetryAfter, when positive, holds the head back from claims until
	// now + RetryAfter. Recommended: a backoff by failure count, e.g. 1s,
	// 10s, 1m, 5m.
	RetryAfter time.Duration
}

// DefaultMaxFailures is the failures at which a head is dead-lettered when
// neither its consumer's registry entry nor the request says.
const DefaultMaxFailures = 5

// maxFailures is the failures at which consumer's head is dead-lettered:
// the registry's a2redis.Consumer.MaxFailures, else the request's, else
// DefaultMaxFailures.
func (s *Store) maxFailures(ctx context.Context, consumer string, requested int) int {
	for _, c := range s.registered(ctx) {
		if c.Name == consumer && c.MaxFailures > 0 {
			return c.MaxFailures
		}
	}
	if requested > 0 {
		return requested
	}
	return DefaultMaxFailures
}

// FailOutcome tells how a FailAttempt ended.
type FailOutcome string

// The failure outcomes.
const (
	// Failed: the failure was counted; the head runs again.
	Failed FailOutcome = "failed"
	// DeadLettered: the failure reached MaxFailures; the cursor stops at
	// the head until a redrive.
	DeadLettered FailOutcome = "dead_lettered"
	// FailSuperseded: the attempt no longer owns the head; nothing written.
	FailSuperseded FailOutcome = "superseded"
)

// FailResult is what a FailAttempt did.
type FailResult struct {
	// Outcome is failed, dead_lettered or superseded.
	Outcome FailOutcome
	// Failures is the head's failure count.
	Failures int64
}

// FailAttempt records a failed attempt: it counts a failure, records the
// error, releases the claim, and holds the head until now + RetryAfter or,
// at MaxFailures, dead-letters it. Repeating the same report is idempotent.
func (s *Store) FailAttempt(ctx context.Context, req FailRequest) (FailResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.failAttempt(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpFail, Session: req.Session, Events: 1})
	res, err := s.failAttempt(ctx, req)
	e := OperationEnd{Session: req.Session, Err: err}
	switch res.Outcome {
	case Failed:
		e.Count = 1
	case DeadLettered:
		e.Count, e.DeadLettered = 1, 1
	}
	end(e)
	return res, err
}

// failAttempt is FailAttempt without its observation.
func (s *Store) failAttempt(ctx context.Context, req FailRequest) (FailResult, error) {
	if err := checkSession(req.Session); err != nil {
		return FailResult{}, err
	}
	if err := checkCause("Head", a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}); err != nil {
		return FailResult{}, err
	}
	if req.MaxFailures < 0 {
		return FailResult{}, check.Invalid("MaxFailures", "is negative (%d)", req.MaxFailures)
	}
	maxFailures := s.maxFailures(ctx, req.Head.Consumer, req.MaxFailures)
	if req.Permanent {
		maxFailures = 1
	}
	if req.RetryAfter < 0 {
		return FailResult{}, check.Invalid("RetryAfter", "is negative (%v)", req.RetryAfter)
	}
	now := s.now()
	hold := ""
	if req.RetryAfter > 0 {
		hold = itoa(now + max(req.RetryAfter.Milliseconds(), 1))
	}
	reply, err := s.run(ctx, "fail", req.Session, []string{req.Head.Consumer, tagOf(req.Head.Lane), itoa(req.Head.Index),
		itoa(req.Attempt), req.Error, itoa(int64(maxFailures)), itoa(now), hold})
	if err != nil {
		return FailResult{}, err
	}
	failures, err := number(reply, 1)
	if err != nil {
		return FailResult{}, err
	}
	switch outcome := word(reply, 0); outcome {
	case "failed", "dead_lettered", "superseded":
		return FailResult{Outcome: FailOutcome(outcome), Failures: failures}, nil
	case "missing":
		return FailResult{}, errorf(a2redis.ErrNoEvent, req.Session, "no event at index %d", req.Head.Index)
	}
	return FailResult{}, fmt.Errorf("%w: fail replied %v", a2redis.ErrUnexpectedReply, reply)
}
