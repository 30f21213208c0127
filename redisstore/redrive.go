package redisstore

import (
	"context"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// RedriveAction is what a redrive does with a dead-lettered head.
type RedriveAction string

// The redrive actions.
const (
	// Retry clears the head's failures and makes it runnable again.
	Retry RedriveAction = "retry"
	// Skip moves the cursor past the head.
	Skip RedriveAction = "skip"
)

// RedriveRequest acts on a consumer's dead-lettered head.
type RedriveRequest struct {
	// Session is the session id. Required.
	Session string
	// Consumer is the consumer whose head it is. Required.
	Consumer string
	// Lane is the lane of the head's cursor (a lane or log cursor, as
	// HeadEvent.Lane reports it); empty for the consumer's event cursor.
	Lane string
	// Index is the dead-lettered head's index. Required.
	Index int64
	// Action is Retry or Skip.
	Action RedriveAction
	// Consumers are the served consumers (for HasPending; see
	// AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// RedriveResult is what a Redrive did.
type RedriveResult struct {
	// Redriven reports that a dead-lettered head was found and acted on.
	Redriven bool
	// HasPending reports whether a served consumer has a live head.
	HasPending bool
}

// Redrive retries or skips a consumer's dead-lettered head: the head of the
// cursor Lane names (the event cursor when empty) at Index.
func (s *Store) Redrive(ctx context.Context, req RedriveRequest) (RedriveResult, error) {
	if err := checkSession(req.Session); err != nil {
		return RedriveResult{}, err
	}
	if err := checkName("Consumer", req.Consumer); err != nil {
		return RedriveResult{}, err
	}
	if err := checkLane("Lane", req.Lane); err != nil {
		return RedriveResult{}, err
	}
	if req.Index < 1 {
		return RedriveResult{}, check.Invalid("Index", "must be at least 1 (got %d)", req.Index)
	}
	if req.Action != Retry && req.Action != Skip {
		return RedriveResult{}, check.Invalid("Action", "must be %q or %q (got %q)", Retry, Skip, req.Action)
	}
	if err := s.checkDeclared(ctx, "Consumer", req.Consumer); err != nil {
		return RedriveResult{}, err
	}
	_, served, err := s.servedFor(ctx, req.Consumers)
	if err != nil {
		return RedriveResult{}, err
	}
	reply, err := s.runIndexed(ctx, "redrive", req.Session, []string{req.Consumer, itoa(req.Index), string(req.Action), itoa(s.now()), served, tagOf(req.Lane)})
	if err != nil {
		return RedriveResult{}, err
	}
	return RedriveResult{Redriven: word(reply, 0) == "1", HasPending: word(reply, 1) == "1"}, nil
}
