package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/internal/wire"
)

// CompleteRequest finishes an attempt.
type CompleteRequest struct {
	// Session is the session id. Required.
	Session string
	// Head names the head: consumer, lane and index.
	Head a2redis.HeadRef
	// Attempt is the attempt the claim returned. Required.
	Attempt int64
	// Events are the events the handler returned; they are appended with
	// Cause = this attempt, atomically with the completion.
	Events []a2redis.Event
	// Consumers are the served consumers (see AppendOptions.Consumers).
	Consumers []a2redis.Consumer
}

// CompleteOutcome tells how a CompleteAttempt ended.
type CompleteOutcome string

// The completion outcomes.
const (
	// Completed: the cursor moved past the head (now or by an earlier try
	// whose acknowledgement was lost).
	Completed CompleteOutcome = "completed"
	// CompleteSuperseded: the attempt no longer owns the head; nothing was
	// written.
	CompleteSuperseded CompleteOutcome = "superseded"
)

// CompleteResult is what a CompleteAttempt did.
type CompleteResult struct {
	// Outcome is completed or superseded.
	Outcome CompleteOutcome
	// Events are the returned events as stored (the committed ones on a
	// replay).
	Events []a2redis.StoredEvent
	// Replayed reports a retry of an already committed completion.
	Replayed bool
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

func completedCount(results []CompleteResult) int {
	n := 0
	for _, r := range results {
		if r.Outcome == Completed {
			n++
		}
	}
	return n
}

// completeAttempt is CompleteAttempt without its observation.
func (s *Store) completeAttempt(ctx context.Context, req CompleteRequest) (CompleteResult, error) {
	if err := checkSession(req.Session); err != nil {
		return CompleteResult{}, err
	}
	cause := a2redis.Cause{Consumer: req.Head.Consumer, Lane: req.Head.Lane, Index: req.Head.Index, Attempt: req.Attempt}
	if err := checkCause("Head", cause); err != nil {
		return CompleteResult{}, err
	}
	_, served, err := s.servedFor(ctx, req.Consumers)
	if err != nil {
		return CompleteResult{}, err
	}
	batch, _, err := s.prepare(req.Events, "Events")
	if err != nil {
		return CompleteResult{}, err
	}
	for i, e := range req.Events {
		if e.Cause != nil {
			return CompleteResult{}, check.Invalid(fmt.Sprintf("Events[%d].Cause", i), "is set: returned events take the completed attempt as their cause")
		}
	}
	now := s.now()
	var reply []rueidis.RedisMessage
	switch {
	case len(batch) > 0:
		reply, err = s.runIndexed(ctx, "complete", req.Session, completeArgs(now, cause, served, batch))
	default:
		// Nothing to append: complete_fast, else complete_event for an
		// event head and complete_many (a fraction of complete's cost) for
		// a lane or log head. { 'ok', outcome } becomes { outcome }.
		args := []string{itoa(now), served, "1", cause.Consumer, tagOf(cause.Lane), itoa(cause.Index), itoa(cause.Attempt)}
		if req.Head.Lane != "" {
			reply, err = s.completeRun(ctx, req.Session, args)
		} else if scripts.GeneralOnly() {
			reply, err = s.run(ctx, "complete_event", req.Session, []string{itoa(now), cause.Consumer, itoa(cause.Index), itoa(cause.Attempt)})
			break
		} else if reply, err = s.run(ctx, "complete_fast", req.Session, s.withCompaction(ctx, args)); (err == nil || handedOn(reply, err)) && word(reply, 0) == "general" {
			// complete_event replies { outcome, ... } itself.
			reply, err = s.run(ctx, "complete_event", req.Session, []string{itoa(now), cause.Consumer, itoa(cause.Index), itoa(cause.Attempt)})
			break
		}
		if err == nil && word(reply, 0) == "ok" {
			reply = reply[1:]
		}
	}
	if err != nil {
		return CompleteResult{}, writeError(req.Session, batch, err)
	}
	switch word(reply, 0) {
	case "ok":
		if len(batch) == 0 {
			return CompleteResult{Outcome: Completed, Events: []a2redis.StoredEvent{}}, nil
		}
		first, err := number(reply, 1)
		if err != nil {
			return CompleteResult{}, err
		}
		stored := appendedEvents(req.Session, batch, first, now, func(int) *a2redis.Cause { return &cause })
		if scheduledBatch(batch) {
			s.publish(ctx, req.Session, wire.EncodeBare(lastIndex(stored)))
		} else {
			s.publish(ctx, req.Session, wire.Encode(lastIndex(stored), now, wakeEntries(stored)))
		}
		return CompleteResult{Outcome: Completed, Events: stored}, nil
	case "duplicate":
		stored, err := replayedEvents(req.Session, batch, reply[1:])
		if err != nil {
			return CompleteResult{}, err
		}
		for _, ev := range stored {
			if ev.Cause == nil || *ev.Cause != cause {
				return CompleteResult{}, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "returned event %q was stored by another attempt", ev.ID)
			}
		}
		if last := lastIndex(stored); last > 0 {
			s.publish(ctx, req.Session, wire.EncodeBare(last))
		}
		return CompleteResult{Outcome: Completed, Events: stored, Replayed: true}, nil
	case "superseded":
		return CompleteResult{Outcome: CompleteSuperseded, Events: []a2redis.StoredEvent{}}, nil
	case "missing":
		return CompleteResult{}, errorf(a2redis.ErrNoEvent, req.Session, "no event at index %d", req.Head.Index)
	case "partial":
		return CompleteResult{}, errorf(a2redis.ErrPartialDuplicateBatch, req.Session, "returned event ids clash with stored events or with the committed completion of index %d", req.Head.Index)
	}
	return CompleteResult{}, fmt.Errorf("%w: complete replied %v", a2redis.ErrUnexpectedReply, reply)
}

// completeArgs are the complete script's arguments for a completion that
// returns batch.
func completeArgs(now int64, cause a2redis.Cause, served string, batch []prepared) []string {
	causeJSON, _ := json.Marshal(cause)
	// The returned ids as the script records them: byte-exact, so a retry
	// of a completion whose ids are not UTF-8 still replays.
	var ids strings.Builder
	for _, e := range batch {
		ids.WriteString(itoa(int64(len(e.id))))
		ids.WriteByte(':')
		ids.WriteString(e.id)
	}
	args := make([]string, 0, 9+len(batch)*4)
	args = append(args, itoa(now), cause.Consumer, tagOf(cause.Lane), itoa(cause.Index), itoa(cause.Attempt),
		string(causeJSON), served, ids.String(), itoa(int64(len(batch))))
	for _, e := range batch {
		args = append(args, e.id, e.typ, string(e.payload), e.targets)
	}
	return args
}

// completeRun runs complete_many's arguments: first the flat
// complete_fast, which handles event, lane and log heads claimed and never
// failed or pinned and hands the rest to complete_many with nothing
// written.
func (s *Store) completeRun(ctx context.Context, session string, args []string) ([]rueidis.RedisMessage, error) {
	if !scripts.GeneralOnly() {
		reply, err := s.run(ctx, "complete_fast", session, s.withCompaction(ctx, args))
		if (err != nil && !handedOn(reply, err)) || word(reply, 0) != "general" {
			return reply, err
		}
	}
	return s.runIndexed(ctx, "complete_many", session, args)
}

// withCompaction is complete_fast's arguments (complete_many's: now,
// served, k, four per attempt, then optionally a holder and an expiry)
// with compact_log's bounds after them, so that a completion that leaves
// the session without live heads rebuilds it to its size in the same call
// (see compactLog), unless Config.NoCompaction or the server refuses DUMP
// in scripts (key locking). The ready update of such a call sends no
// compact_log after it (selfCompacting).
func (s *Store) withCompaction(ctx context.Context, args []string) []string {
	if s.cfg.NoCompaction {
		return args
	}
	if locking, err := s.keyLocking(ctx); err != nil || locking {
		return args
	}
	k, err := strconv.Atoi(args[2])
	if err != nil {
		return args
	}
	out := make([]string, 0, 6+4*k)
	out = append(out, args...)
	for len(out) < 5+4*k {
		out = append(out, "") // no holder, no expiry
	}
	return append(out, compactBounds)
}

// compactBounds is compact_log's bounds as complete_fast takes them.
var compactBounds = strconv.Itoa(CompactLogEntries) + ":" + strconv.Itoa(CompactChunkFields) + ":" + strconv.Itoa(CompactBytes)

// selfCompacting tells whether a script call rebuilds the session to its
// size itself when it leaves it without work: complete_fast given
// withCompaction's bounds.
func selfCompacting(name string, args []string) bool {
	if name != "complete_fast" || len(args) < 3 {
		return false
	}
	k, err := strconv.Atoi(args[2])
	return err == nil && len(args) > 5+4*k && args[5+4*k] != ""
}
