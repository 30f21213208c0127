package redisstore

import (
	"context"
	"unicode/utf8"
)

// The operation names an Observer sees (Operation.Name).
const (
	// OpAppend is Append: Count is the events appended (or replayed).
	OpAppend = "append"
	// OpClaim is ClaimAvailable: Count is the heads claimed.
	OpClaim = "claim"
	// OpClaimNext is ClaimNext: Count is the heads claimed.
	OpClaimNext = "claim_next"
	// OpComplete is CompleteAttempt and CompleteAttempts: Count is the
	// attempts completed.
	OpComplete = "complete"
	// OpCompleteAndClaim is CompleteAndClaim: Count is the attempts
	// completed; Claimed the next heads claimed.
	OpCompleteAndClaim = "complete_and_claim"
	// OpFail is FailAttempt: Count is 1 when the failure was recorded;
	// DeadLettered is 1 when it dead-lettered the head.
	OpFail = "fail"
	// OpRelease is Release: Count is the attempts given back.
	OpRelease = "release"
)

// MaxTraceContext is the longest trace context the store keeps with an
// append's events; a longer one (or one that is not valid UTF-8) is not
// stored.
const MaxTraceContext = 256

// Observer is told about the store's work operations (Config.Observer):
// appends, claims and the settling of attempts. Package a2otel implements
// it with OpenTelemetry spans and metrics. With no observer the store does
// none of this work.
type Observer interface {
	// Begin is called as an operation starts; the operation runs with the
	// context it returns, and calls end once, when it returns.
	Begin(ctx context.Context, op Operation) (context.Context, func(OperationEnd))
	// TraceContext returns the trace context Append stores with the events
	// it writes (conventionally a W3C traceparent of the span in ctx), or
	// "" to store none. An append that stores one takes the general append
	// script rather than the single-event and coalesced fast paths.
	TraceContext(ctx context.Context) string
}

// Operation is a store operation as an Observer sees it begin.
type Operation struct {
	// Name is one of the Op… names.
	Name string
	// Session is the session id; "" for ClaimNext, which picks one.
	Session string
	// Events is the number of events (Append) or attempts (settling
	// operations) it was asked to write; 0 for claims.
	Events int
}

// OperationEnd is how an operation ended.
type OperationEnd struct {
	// Session is the session it worked on (for ClaimNext, the one it
	// claimed from; "" when it claimed nothing).
	Session string
	// Count is what it did (see the Op… names).
	Count int
	// Claimed is the heads CompleteAndClaim claimed next.
	Claimed int
	// DeadLettered is the heads it dead-lettered (FailAttempt, and the
	// lapsed heads a claim dead-lettered instead of claiming).
	DeadLettered int
	// Err is the error it returned.
	Err error
}

// traceArg is the trace context as stored: empty when too long or not
// valid UTF-8.
func traceArg(tc string) string {
	if len(tc) > MaxTraceContext || !utf8.ValidString(tc) {
		return ""
	}
	return tc
}

func completedCount(results []CompleteResult) int {
	n := 0
	for _, r := range results {
		if r.Outcome == Completed {
			n++
		}
	}
	return n
}

// ClaimAvailable claims every eligible head of a session for a holder, up to
// the limit: live, served, not excluded, at or below Through, and not held
// by an unexpired claim or retry hold. Each claim bumps the head's attempt;
// a lapsed claim taken over counts a failure. A claim whose outcome is
// unknown (its connection failed) is not retried, since a second one would
// bump the attempts again: the error reaches the caller, and heads it may
// have claimed are taken over once the lease lapses. With
// Config.Durability, a claim not acknowledged in time returns its result
// together with an a2redis.ErrNotReplicated error: the heads are held.
func (s *Store) ClaimAvailable(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.claimAvailable(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpClaim, Session: req.Session})
	res, err := s.claimAvailable(ctx, req)
	end(OperationEnd{Session: req.Session, Count: len(res.Heads), DeadLettered: len(res.DeadLettered), Err: err})
	return res, err
}

// ClaimNext claims runnable heads from a session the ready index lists as
// due, with ClaimAvailable's lease, fencing, MaxFailures and Limit rules.
// It reads the earliest due sessions of every shard (one round trip) and
// tries them oldest first, shuffled among the first few so that workers
// calling at once spread over sessions; a claim that leaves work behind
// moves its session behind the others, so one busy session cannot starve
// the rest. A session that gives nothing is listed again from its true
// state. With nothing claimable it reports Busy or Settled and NextAt.
func (s *Store) ClaimNext(ctx context.Context, req ClaimNextRequest) (ClaimNextResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.claimNext(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpClaimNext})
	res, err := s.claimNext(ctx, req)
	end(OperationEnd{Session: res.Session, Count: len(res.Heads), DeadLettered: len(res.DeadLettered), Err: err})
	return res, err
}

// CompleteAttempt finishes a claimed attempt: fenced by (consumer, lane,
// index, attempt, live claim), it moves the cursor past its head and
// appends the returned events with their cause set to this attempt, in one
// atomic step. A retry after a lost acknowledgement replays the committed
// events; a retry with other ids fails with ErrPartialDuplicateBatch; a
// stale attempt is superseded; an index with no event fails with ErrNoEvent.
// A completion returning events that the store gave up on fails with an
// *a2redis.BatchError carrying the returned events' ids.
func (s *Store) CompleteAttempt(ctx context.Context, req CompleteRequest) (CompleteResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.completeAttempt(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpComplete, Session: req.Session, Events: 1})
	res, err := s.completeAttempt(ctx, req)
	end(OperationEnd{Session: req.Session, Count: completedCount([]CompleteResult{res}), Err: err})
	return res, err
}

// CompleteAttempts completes several claimed attempts of one session in one
// script call: what a worker does after handling the heads one claim gave
// it, at a fraction of the cost of one CompleteAttempt per head. Each
// attempt is fenced as CompleteAttempt fences it and gets its own result, in
// request order: completed (Replayed when an earlier try had committed it)
// or superseded. The call is atomic: an index with no event (ErrNoEvent) or
// an attempt whose committed completion returned events
// (ErrPartialDuplicateBatch: replay that one with CompleteAttempt) fails it
// with nothing written. Completions that return events go through
// CompleteAttempt.
func (s *Store) CompleteAttempts(ctx context.Context, req CompleteAttemptsRequest) ([]CompleteResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.completeMany(ctx, req)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpComplete, Session: req.Session, Events: len(req.Attempts)})
	res, err := s.completeMany(ctx, req)
	end(OperationEnd{Session: req.Session, Count: completedCount(res), Err: err})
	return res, err
}

// CompleteAndClaim completes attempts as CompleteAttempts does and, in the
// same script call, claims the next head of every lane it moved on for
// next.Holder: a strictly ordered lane then costs one script call per
// event, as BullMQ's moveToFinished hands its worker the next job. The
// claimed heads are fresh (attempt 1), with their events. A completion the
// flat path cannot take (a log head, a head that failed before, a
// replayed completion) goes through the general path, and the next heads
// are then claimed by a second call, up to one per completed lane head.
func (s *Store) CompleteAndClaim(ctx context.Context, req CompleteAttemptsRequest, next NextClaim) (CompleteAndClaimResult, error) {
	o := s.cfg.Observer
	if o == nil {
		return s.completeAndClaim(ctx, req, next)
	}
	ctx, end := o.Begin(ctx, Operation{Name: OpCompleteAndClaim, Session: req.Session, Events: len(req.Attempts)})
	res, err := s.completeAndClaim(ctx, req, next)
	end(OperationEnd{Session: req.Session, Count: completedCount(res.Results), Claimed: len(res.Next.Heads), DeadLettered: len(res.Next.DeadLettered), Err: err})
	return res, err
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
