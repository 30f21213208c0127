package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// CompleteAttemptsRequest completes several claimed attempts of one
// session, none of which returns events.
type CompleteAttemptsRequest struct {
	// Session is the session id. Required.
	Session string
	// Attempts are the attempts to complete: at most Config.MaxBatch, no
	// head named twice.
	Attempts []Attempt
	// Consumers are the served consumers (see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// causes are the attempts as the causes their completions would be.
func (r CompleteAttemptsRequest) causes() []a2redis.Cause {
	out := make([]a2redis.Cause, len(r.Attempts))
	for i, a := range r.Attempts {
		out[i] = a2redis.Cause{Consumer: a.Head.Consumer, Lane: a.Head.Lane, Index: a.Head.Index, Attempt: a.Attempt}
	}
	return out
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

// completeMany is CompleteAttempts without its observation.
func (s *Store) completeMany(ctx context.Context, req CompleteAttemptsRequest) ([]CompleteResult, error) {
	results, _, err := s.completeAttempts(ctx, req, nil)
	return results, err
}

// NextClaim asks a completion to claim, in the same script call, the next
// head of every lane it moves on, for Holder until now + TTL.
type NextClaim struct {
	// Holder names the claimant. Required.
	Holder string
	// TTL is the lease of the claimed heads. Required.
	TTL time.Duration
}

// CompleteAndClaimResult is what a CompleteAndClaim did.
type CompleteAndClaimResult struct {
	// Results are the completions, one per attempt (as CompleteAttempts).
	Results []CompleteResult
	// Next are the lanes' next heads it claimed for the holder (Outcome
	// Claimed), each with its event; Settled when it claimed none.
	Next ClaimResult
}

// CompleteAndClaim completes attempts as CompleteAttempts does and, in the
// same script call, claims for next.Holder the next head of every lane or
// log cursor it moved on, when that head may be claimed now (a lane's next
// event scheduled for later is not): a strictly ordered lane or a typed log
// consumer then costs one script call per event, as BullMQ's
// moveToFinished hands its worker the next job. The claimed heads are
// fresh (attempt 1), with their events. The flat complete_fast takes the
// common case; the rest (a head that failed before, a replayed completion,
// a log whose type index must first reach further back) goes through the
// general complete_many, which claims the same heads in its one call.
// With Config.Durability, a call not acknowledged in time returns its
// results and claimed heads (applied and held) together with an
// a2redis.ErrNotReplicated error, as CompleteAttempts returns its results.
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

// completeAndClaim is CompleteAndClaim without its observation.
func (s *Store) completeAndClaim(ctx context.Context, req CompleteAttemptsRequest, next NextClaim) (CompleteAndClaimResult, error) {
	if err := checkName("Holder", next.Holder); err != nil {
		return CompleteAndClaimResult{}, err
	}
	if next.TTL <= 0 {
		return CompleteAndClaimResult{}, check.Invalid("TTL", "must be positive (got %v)", next.TTL)
	}
	if paused := s.registryNow(ctx).paused; len(paused) > 0 {
		for _, a := range req.Attempts {
			if slices.Contains(paused, a.Head.Consumer) {
				// A paused consumer's lane takes no next head.
				results, _, err := s.completeAttempts(ctx, req, nil)
				return CompleteAndClaimResult{Results: results, Next: ClaimResult{Outcome: Settled}}, err
			}
		}
	}
	results, claimed, err := s.completeAttempts(ctx, req, &next)
	return CompleteAndClaimResult{Results: results, Next: claimed}, err
}

// completeAttempts is CompleteAttempts, and CompleteAndClaim with next.
func (s *Store) completeAttempts(ctx context.Context, req CompleteAttemptsRequest, next *NextClaim) ([]CompleteResult, ClaimResult, error) {
	results, claimed, err := s.completeAttemptsRun(ctx, req, next)
	// A completion not acknowledged in time is applied all the same (the
	// lanes moved on, their next heads are held): its results and claims
	// are returned with the shortfall.
	var notReplicated error
	if errors.Is(err, a2redis.ErrNotReplicated) && results != nil {
		notReplicated, err = err, nil
	}
	if err != nil || next == nil {
		return results, claimed, cmp.Or(err, notReplicated)
	}
	if claimed.Outcome == Claimed {
		for _, h := range claimed.Heads {
			if h.ID == "" {
				// Not sent along (several lanes moved on): read them.
				return results, claimed, cmp.Or(s.claimedEvents(ctx, req.Session, &claimed), notReplicated)
			}
		}
		return results, claimed, notReplicated
	}
	if claimed.Outcome == "" {
		// Nothing completed (complete_fast sends no claims then).
		claimed = ClaimResult{Outcome: Settled}
	}
	return results, claimed, notReplicated
}

func (s *Store) completeAttemptsRun(ctx context.Context, req CompleteAttemptsRequest, next *NextClaim) ([]CompleteResult, ClaimResult, error) {
	var none ClaimResult
	if err := checkSession(req.Session); err != nil {
		return nil, none, err
	}
	if err := check.Completions("Attempts", req.causes(), s.cfg.MaxBatch); err != nil {
		return nil, none, err
	}
	_, served, err := s.servedFor(ctx, req.Consumers)
	if err != nil {
		return nil, none, err
	}
	now := s.now()
	args := make([]string, 0, 5+4*len(req.Attempts))
	args = append(args, itoa(now), served, itoa(int64(len(req.Attempts))))
	for _, a := range req.Attempts {
		args = append(args, a.Head.Consumer, tagOf(a.Head.Lane), itoa(a.Head.Index), itoa(a.Attempt))
	}
	if len(req.Attempts) == 0 {
		return []CompleteResult{}, ClaimResult{Outcome: Settled}, nil
	}
	var fresh a2redis.HeadState
	if next != nil {
		expires := now + max(next.TTL.Milliseconds(), 1)
		args = append(args, next.Holder, itoa(expires))
		fresh = a2redis.HeadState{
			Attempts: 1, FirstClaimedAt: time.UnixMilli(now), LastClaimedAt: time.UnixMilli(now),
			Holder: next.Holder, ClaimExpiresAt: time.UnixMilli(expires),
		}
	}
	reply, err := s.completeRun(ctx, req.Session, args)
	notReplicated := notReplicatedOnly(reply, &err)
	if err != nil {
		return nil, none, err
	}
	results, claimed, err := completeOutcomes(req, next, reply, fresh)
	if err == nil {
		err = notReplicated
	}
	return results, claimed, err
}

// completeOutcomes decodes complete_fast's or complete_many's reply: the
// results in request order and, for CompleteAndClaim, the next heads
// complete_fast claimed.
func completeOutcomes(req CompleteAttemptsRequest, next *NextClaim, reply []rueidis.RedisMessage, fresh a2redis.HeadState) ([]CompleteResult, ClaimResult, error) {
	var none ClaimResult
	claimed := none
	if next != nil && word(reply, 0) == "ok" && len(reply) == len(req.Attempts)+2 {
		// complete_fast took it: the next heads it claimed follow the
		// outcomes. (Without them the general path ran, or nothing
		// completed.)
		r, err := nextHeads(req.Session, reply[len(reply)-1], fresh)
		if err != nil {
			return nil, none, err
		}
		claimed, reply = r, reply[:len(reply)-1]
	}
	switch word(reply, 0) {
	case "ok":
		if len(reply) != len(req.Attempts)+1 {
			break
		}
		results := make([]CompleteResult, len(req.Attempts))
		for i := range results {
			switch word(reply, i+1) {
			case "ok":
				results[i] = CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}}
			case "duplicate":
				results[i] = CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}, Replayed: true}
			case "superseded":
				results[i] = CompleteResult{Outcome: CompleteSuperseded, Events: []a2redis.StoredEvent{}}
			default:
				return nil, none, fmt.Errorf("%w: complete_many replied %v", a2redis.ErrUnexpectedReply, reply)
			}
		}
		return results, claimed, nil
	case "missing", "partial":
		j, err := number(reply, 1)
		if err != nil || j < 1 || int(j) > len(req.Attempts) {
			break
		}
		head := req.Attempts[j-1].Head
		if word(reply, 0) == "missing" {
			return nil, none, errorf(a2redis.ErrNoEvent, req.Session, "Attempts[%d]: no event at index %d", j-1, head.Index)
		}
		return nil, none, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "Attempts[%d]: the committed completion of index %d returned events; replay it with CompleteAttempt", j-1, head.Index)
	}
	return nil, none, fmt.Errorf("%w: complete_many replied %v", a2redis.ErrUnexpectedReply, reply)
}

// nextHeads decodes the next heads complete_fast claimed: { consumer,
// kind, index } each, all fresh.
func nextHeads(session string, m rueidis.RedisMessage, fresh a2redis.HeadState) (ClaimResult, error) {
	r := ClaimResult{Outcome: Settled}
	for _, part := range array(m) {
		head, parts, err := claimedHead(session, part, fresh, "claimed next head")
		if err != nil {
			return ClaimResult{}, err
		}
		if len(parts) == 4 {
			// The script sent the lone next head's event along.
			ev, err := entry(session, parts[3])
			if err != nil || ev.Index != head.Index {
				return ClaimResult{}, fmt.Errorf("%w: claimed next head's entry %v", a2redis.ErrUnexpectedReply, parts[3])
			}
			head.StoredEvent = ev
		}
		r.Heads = append(r.Heads, head)
	}
	if len(r.Heads) > 0 {
		r.Outcome = Claimed
		// By index, consumer and lane (two lanes of a consumer may move
		// on to the same event).
		sort.SliceStable(r.Heads, func(i, j int) bool {
			a, b := r.Heads[i], r.Heads[j]
			if a.Index != b.Index {
				return a.Index < b.Index
			}
			if a.Consumer != b.Consumer {
				return a.Consumer < b.Consumer
			}
			return a.Lane < b.Lane
		})
	}
	return r, nil
}
