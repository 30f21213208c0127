package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/rows"
)

// CancelRequest names a head to cancel: a consumer's head at an index.
type CancelRequest struct {
	// Session is the session id. Required.
	Session string
	// Consumer is the consumer whose head it is. Required, and declared
	// (registered) when the prefix has a consumer registry.
	Consumer string
	// Lane is the lane of the head's cursor (a lane or log cursor, as
	// HeadEvent.Lane reports it); empty for the consumer's event cursor.
	Lane string
	// Index is the head's index. Required.
	Index int64
	// Consumers are the served consumers (for HasPending and a log
	// cursor's types; see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// CancelOutcome is what a Cancel did.
type CancelOutcome string

// The outcomes of a Cancel.
const (
	// Cancelled: the head was skipped without running (again); its cursor
	// moved on.
	Cancelled CancelOutcome = "cancelled"
	// CancelDeadLettered: the head is dead-lettered; nothing was written
	// (Redrive with Skip moves past it).
	CancelDeadLettered CancelOutcome = "dead-lettered"
	// CancelNotFound: the cursor has no head at that index (done already,
	// cleared, or never); nothing was written.
	CancelNotFound CancelOutcome = "not-found"
)

// CancelResult is what a Cancel did.
type CancelResult struct {
	// Outcome is Cancelled, CancelDeadLettered or CancelNotFound.
	Outcome CancelOutcome
	// Attempts is how many times the cancelled head had been claimed (0:
	// it never ran; with a claim still running, its attempt is now
	// superseded).
	Attempts int64
	// HasPending reports whether a served consumer has a live head.
	HasPending bool
}

// Cancel skips a head that has not completed — free, held for a retry, a
// snooze or its scheduled time (Event.NotBefore), or claimed by a running
// attempt — without running it: its cursor moves past it as a completion
// would (a lane's next head becomes claimable), and the head is recorded
// as processed by attempt 0 and cancelled, never as a dead letter. It is
// fenced like a completion: the running attempt's later completion,
// failure, renewal or release is refused as superseded (the returned
// events of such a completion are not appended). A dead-lettered head is
// left as it is (Redrive with Skip moves past it). Not retried after an
// unknown outcome (like Redrive): a second try would find no head.
func (s *Store) Cancel(ctx context.Context, req CancelRequest) (CancelResult, error) {
	if err := checkSession(req.Session); err != nil {
		return CancelResult{}, err
	}
	if err := checkName("Consumer", req.Consumer); err != nil {
		return CancelResult{}, err
	}
	if err := checkLane("Lane", req.Lane); err != nil {
		return CancelResult{}, err
	}
	if req.Index < 1 {
		return CancelResult{}, check.Invalid("Index", "must be at least 1 (got %d)", req.Index)
	}
	if err := s.checkDeclared(ctx, "Consumer", req.Consumer); err != nil {
		return CancelResult{}, err
	}
	_, served, err := s.servedFor(ctx, req.Consumers)
	if err != nil {
		return CancelResult{}, err
	}
	reply, err := s.runIndexed(ctx, "cancel", req.Session, []string{req.Consumer, itoa(req.Index), tagOf(req.Lane), itoa(s.now()), served})
	if err != nil {
		return CancelResult{}, err
	}
	res := CancelResult{HasPending: word(reply, 1) == "1"}
	switch word(reply, 0) {
	case "cancelled":
		res.Outcome = Cancelled
		res.Attempts, _ = strconv.ParseInt(word(reply, 2), 10, 64)
	case "dead":
		res.Outcome = CancelDeadLettered
	case "none":
		res.Outcome = CancelNotFound
	default:
		return CancelResult{}, fmt.Errorf("%w: cancel replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	return res, nil
}

// HeadRecord is what a head's row records once its cursor moved past it.
type HeadRecord struct {
	// Done reports that the cursor moved past the head in the current
	// lifetime (completed, skipped or cancelled); false for a head still
	// waiting, or none.
	Done bool
	// DoneAt is when.
	DoneAt time.Time
	// Attempt is the attempt that completed it; 0 when it was skipped
	// (Redrive) or cancelled.
	Attempt int64
	// CancelledAt is when Cancel skipped it; zero when it was not
	// cancelled.
	CancelledAt time.Time
}

// Cancelled reports whether Cancel skipped the head.
func (r HeadRecord) Cancelled() bool { return !r.CancelledAt.IsZero() }

// HeadRecord reads the record of a head its cursor moved past: whether it
// was completed (and by which attempt), skipped or cancelled (one HMGET of
// its row). A cancelled head shows here, never among the dead letters.
func (s *Store) HeadRecord(ctx context.Context, session string, ref a2redis.HeadRef) (HeadRecord, error) {
	if err := checkSession(session); err != nil {
		return HeadRecord{}, err
	}
	if err := checkName("Consumer", ref.Consumer); err != nil {
		return HeadRecord{}, err
	}
	if err := checkLane("Lane", ref.Lane); err != nil {
		return HeadRecord{}, err
	}
	if ref.Index < 1 {
		return HeadRecord{}, check.Invalid("Index", "must be at least 1 (got %d)", ref.Index)
	}
	row := rows.EventRow(ref.Consumer)
	if ref.Lane != "" {
		row = rows.LaneRow(ref.Consumer, ref.Lane)
	}
	k := s.keys(session)
	cmd := s.client.B().Hmget().Key(k.Heads(rows.HeadChunk(ref.Index))).
		Field(rows.RowField(ref.Index, row, rows.ColProcessed), rows.RowField(ref.Index, row, rows.ColCancelled)).Build()
	values, err := s.do(ctx, cmd).ToArray()
	if err != nil {
		return HeadRecord{}, err
	}
	clear, err := s.ClearIndex(ctx, session)
	if err != nil {
		return HeadRecord{}, err
	}
	var r HeadRecord
	if len(values) != 2 || ref.Index <= clear {
		return r, nil
	}
	if p, err := values[0].ToString(); err == nil {
		at, attempt, _ := strings.Cut(p, ":")
		ms, _ := strconv.ParseInt(at, 10, 64)
		r.Done, r.DoneAt = true, time.UnixMilli(ms)
		r.Attempt, _ = strconv.ParseInt(attempt, 10, 64)
	}
	if x, err := values[1].ToString(); err == nil {
		ms, _ := strconv.ParseInt(x, 10, 64)
		r.CancelledAt = time.UnixMilli(ms)
	}
	return r, nil
}
