package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The executor runs one claimed head: it waits for an earlier attempt of
// the same head still running here, calls the handler (its timeout, a
// panic made an error), and maps the result to the store's write: a
// completion that returned events (CompleteAttempt), a snooze or a stop
// (Release), a failure with the consumer's backoff or a permanent one
// (FailAttempt). A completion that returned nothing goes to the completer.

// run runs a job's handler and records its outcome.
func (w *Worker) run(j *job) {
	if j.prev != nil {
		<-j.prev.done
	}
	if j.ctx.Err() != nil {
		w.finish(j, nil, context.Cause(j.ctx), 0)
		return
	}
	events, ran, err := w.invoke(j)
	w.finish(j, events, err, ran)
}

func (w *Worker) invoke(j *job) (events []a2redis.Event, ran time.Duration, err error) {
	ctx := j.ctx
	if j.c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.c.timeout)
		defer cancel()
	}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil { // a middleware panicked
			events, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
		}
		ran = time.Since(start)
	}()
	events, err = j.c.handler(ctx, j.head)
	return events, 0, err
}

// finish records a job's outcome once its handler returned.
func (w *Worker) finish(j *job, events []a2redis.Event, err error, ran time.Duration) {
	// A lane head's slot passes to its lane's next head, chainQuantum
	// heads in a row at most while another session waits (inbox lock taken
	// alone), even when a slot is free: that slot alone would go round the
	// waiting sessions while every chain kept its own.
	others := j.head.Lane != "" && j.turn.chained.Load() >= chainQuantum && w.othersWaiting(j.session)
	w.mu.Lock()
	w.leaveLocked(j, j.state == jobRunning)
	j.state = jobSettling
	lost, stopped := j.lost, j.stopped
	batched := err == nil && len(events) == 0 && !lost
	j.keepSlot = batched && j.head.Lane != "" && !w.stopping && !others
	if !j.keepSlot {
		w.freeSlotLocked()
	}
	if batched {
		w.enqueue(j, w.active[j.session] == 0)
	}
	w.mu.Unlock()
	if batched {
		return
	}
	o := Outcome{Head: j.head, Err: err, Duration: ran}
	var snooze *SnoozeError
	switch {
	case lost:
		o.Kind = OutcomeLeaseLost
	case err == nil:
		w.complete(j, events, &o)
	case errors.As(err, &snooze):
		o.RetryAfter = max(snooze.Delay, 0)
		w.release(j, o.RetryAfter, OutcomeSnoozed, &o)
	case stopped:
		w.release(j, 0, OutcomeReleased, &o)
	default:
		w.fail(j, err, errors.Is(err, ErrPermanent), &o)
	}
	if o.Kind == OutcomeFailed || o.Kind == OutcomeSnoozed {
		// No wake-up announces the end of a hold: look again then.
		w.inbox.holdEnds(w.store.Now().Add(o.RetryAfter))
	}
	w.settle(j, o)
}

// complete records a completion that returned events.
func (w *Worker) complete(j *job, events []a2redis.Event, o *Outcome) {
	res, err := w.store.CompleteAttempt(w.wctx, redisstore.CompleteRequest{
		Session: j.session, Head: j.head.Ref(), Attempt: j.head.Attempts, Events: events,
	})
	switch {
	case errors.Is(err, a2redis.ErrSupersededAttempt):
		o.Kind = OutcomeSuperseded
	case err != nil:
		o.Kind, o.Err = OutcomeWriteFailed, fmt.Errorf("worker: completing: %w", err)
	case res.Outcome == redisstore.CompleteSuperseded:
		o.Kind = OutcomeSuperseded
	default:
		o.Kind, o.Events = OutcomeCompleted, res.Events
	}
}

// release gives a job's claim back without a failure.
func (w *Worker) release(j *job, delay time.Duration, kind OutcomeKind, o *Outcome) {
	out, err := w.store.Release(w.wctx, redisstore.ReleaseRequest{
		Session: j.session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(j.head)}, Delay: delay,
	})
	switch {
	case err != nil:
		o.Kind, o.Err = OutcomeWriteFailed, fmt.Errorf("worker: releasing: %w", err)
	case out[0] == redisstore.ReleaseSuperseded:
		o.Kind = OutcomeSuperseded
	default:
		o.Kind = kind
	}
}

// fail records a failed attempt with the consumer's backoff, or a
// permanent one that dead-letters at once.
func (w *Worker) fail(j *job, err error, permanent bool, o *Outcome) {
	retry := time.Duration(0)
	if !permanent {
		retry = max(j.c.backoff(j.head.Failures+1, err), 0)
	}
	res, werr := w.store.FailAttempt(w.wctx, redisstore.FailRequest{
		Session: j.session, Head: j.head.Ref(), Attempt: j.head.Attempts, Error: errorText(err),
		MaxFailures: w.cfg.MaxFailures, Permanent: permanent, RetryAfter: retry,
	})
	switch {
	case werr != nil:
		o.Kind, o.Err = OutcomeWriteFailed, fmt.Errorf("worker: recording the failure %q: %w", errorText(err), werr)
	case res.Outcome == redisstore.FailSuperseded:
		o.Kind = OutcomeSuperseded
	case res.Outcome == redisstore.DeadLettered:
		o.Kind, o.Failures = OutcomeDeadLettered, res.Failures
	default:
		o.Kind, o.Failures, o.RetryAfter = OutcomeFailed, res.Failures, retry
	}
}

// errorText is the error text recorded on a failed head: valid UTF-8, at
// most maxErrorText bytes.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
