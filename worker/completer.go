package worker

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The completer: heads whose handler returned no events are completed in
// batches, one script call per session for up to CompleteBatch heads. A
// batch is written as soon as nothing else of its session runs here (or it
// is full, or the worker stops), else after CompleteLinger; with lane heads
// in it the same call claims each lane's next head (CompleteAndClaim),
// which runs in the slot its predecessor kept.

// batches is the completer's state. Its lock is taken alone (a linger
// timer) or under the worker's mu, never the other way round.
type batches struct {
	mu       sync.Mutex
	sessions map[string]*sessionState
	stopping bool // the worker stops: write every batch at once, claim nothing next
}

// sessionState is one session's batch.
type sessionState struct {
	batch    []*job // completions waiting to be written
	flushing bool   // a batch of the session is being written
	timer    *time.Timer
}

// enqueue adds a job that returned no events to its session's batch; idle
// says that nothing else of the session runs here (mu held).
func (w *Worker) enqueue(j *job, idle bool) {
	b := &w.batches
	b.mu.Lock()
	st := b.sessions[j.session]
	if st == nil {
		st = &sessionState{}
		b.sessions[j.session] = st
	}
	st.batch = append(st.batch, j)
	w.maybeFlushLocked(j.session, st, idle)
	b.mu.Unlock()
}

// sessionIdle writes session's batch now that nothing else of it runs
// here (mu held).
func (w *Worker) sessionIdle(session string) {
	b := &w.batches
	b.mu.Lock()
	if st := b.sessions[session]; st != nil {
		w.maybeFlushLocked(session, st, true)
	}
	b.mu.Unlock()
}

// flushAll writes every waiting batch at once, as a stop begins; from then
// on batches are written as they come and claim no next heads (mu held).
func (w *Worker) flushAll() {
	b := &w.batches
	b.mu.Lock()
	b.stopping = true
	for session, st := range b.sessions {
		w.maybeFlushLocked(session, st, true)
	}
	b.mu.Unlock()
}

// maybeFlushLocked writes a session's batch now if idle (nothing else of
// the session runs here), the batch is full or the worker stops, else once
// CompleteLinger has passed (batches.mu held).
func (w *Worker) maybeFlushLocked(session string, st *sessionState, idle bool) {
	if st.flushing || len(st.batch) == 0 {
		return
	}
	if w.batches.stopping || idle || len(st.batch) >= w.cfg.CompleteBatch || w.cfg.CompleteLinger < 0 {
		w.flushNowLocked(session, st)
		return
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(w.cfg.CompleteLinger, func() {
			w.batches.mu.Lock()
			defer w.batches.mu.Unlock()
			st.timer = nil
			w.flushNowLocked(session, st)
		})
	}
}

func (w *Worker) flushNowLocked(session string, st *sessionState) {
	if st.flushing || len(st.batch) == 0 {
		return
	}
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	n := min(len(st.batch), w.cfg.CompleteBatch)
	jobs := slices.Clone(st.batch[:n])
	st.batch = slices.Delete(st.batch, 0, n)
	st.flushing = true
	go w.flush(session, jobs, w.batches.stopping)
}

// flushed ends a session's write: the next batch goes out as
// maybeFlushLocked says, and a session with nothing left is forgotten
// (mu held).
func (w *Worker) flushed(session string) {
	b := &w.batches
	b.mu.Lock()
	st := b.sessions[session]
	st.flushing = false
	w.maybeFlushLocked(session, st, w.active[session] == 0)
	if len(st.batch) == 0 && !st.flushing && st.timer == nil {
		delete(b.sessions, session)
	}
	b.mu.Unlock()
}

// flush completes a batch of one session's heads that returned no events
// in one script call; with lane heads among them (and the worker not
// stopping), the same call claims each lane's next head, which runs in the
// slot its predecessor held. A lane head that gave its slot back (its chain
// reached chainQuantum while another session waited) is completed in a
// call of its own that claims nothing: otherwise the call would claim its
// lane's next head too, and that head would take the slot just freed for
// the sessions waiting (before the dispatcher could give it to them).
func (w *Worker) flush(session string, jobs []*job, stopping bool) {
	slots := 0
	var yielded, kept []*job
	var turns map[string]*turn // the kept slots' turns, by laneKey
	for _, j := range jobs {
		switch {
		case j.keepSlot:
			slots++
			if turns == nil {
				turns = map[string]*turn{}
			}
			turns[laneKey(j.head.Consumer, j.head.Lane)] = j.turn
			kept = append(kept, j)
		case j.head.Lane != "":
			yielded = append(yielded, j)
		default:
			kept = append(kept, j)
		}
	}
	if slots > 0 && len(yielded) > 0 && !stopping {
		w.settleBatch(yielded, w.completeBatch(session, yielded))
		jobs = kept
	}
	leaseFrom := time.Now()
	var r batchResult
	var next redisstore.ClaimResult
	if slots > 0 && !stopping {
		cc, err := w.store.CompleteAndClaim(w.wctx, w.completeRequest(session, jobs), redisstore.NextClaim{Holder: w.cfg.ID, TTL: w.cfg.TTL})
		r, next = w.batchDone(jobs, cc.Results, err), cc.Next
	} else {
		r = w.completeBatch(session, jobs)
	}
	w.mu.Lock()
	var heads []a2redis.HeadEvent
	if r.err == nil && next.Outcome == redisstore.Claimed {
		heads = next.Heads
	}
	w.admitNextLocked(session, heads, slots, turns, leaseFrom)
	w.flushed(session)
	w.mu.Unlock()
	w.settleBatch(jobs, r)
}

// batchResult is what a batched completion call returned.
type batchResult struct {
	results []redisstore.CompleteResult
	err     error
}

// completeRequest is the CompleteAttempts request of jobs, heads of
// session.
func (w *Worker) completeRequest(session string, jobs []*job) redisstore.CompleteAttemptsRequest {
	attempts := make([]redisstore.Attempt, len(jobs))
	for i, j := range jobs {
		attempts[i] = redisstore.AttemptOf(j.head)
	}
	return redisstore.CompleteAttemptsRequest{Session: session, Attempts: attempts, Consumers: w.served}
}

// batchDone is what a batched completion of jobs returned: a completion
// recorded but not acknowledged by the replicas in time stands (the error
// is reported, not returned).
func (w *Worker) batchDone(jobs []*job, results []redisstore.CompleteResult, err error) batchResult {
	if w.heldDespite(w.wctx, err, len(results) == len(jobs)) {
		err = nil
	}
	return batchResult{results: results, err: err}
}

// completeBatch completes jobs in one CompleteAttempts call (claiming
// nothing).
func (w *Worker) completeBatch(session string, jobs []*job) batchResult {
	results, err := w.store.CompleteAttempts(w.wctx, w.completeRequest(session, jobs))
	return w.batchDone(jobs, results, err)
}

// settleBatch reports each job of a batched completion.
func (w *Worker) settleBatch(jobs []*job, r batchResult) {
	for i, j := range jobs {
		o := Outcome{Head: j.head, Kind: OutcomeCompleted}
		switch {
		case r.err != nil:
			o.Kind, o.Err = OutcomeWriteFailed, fmt.Errorf("worker: completing %d heads: %w", len(jobs), r.err)
		case r.results[i].Outcome == redisstore.CompleteSuperseded:
			o.Kind = OutcomeSuperseded
		}
		w.settle(j, o)
	}
}
