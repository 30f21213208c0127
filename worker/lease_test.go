package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// A handler that runs far longer than its lease keeps its claim while
// renewal works: the store's clock moves on by three leases in steps that
// never pass the lease's end, and the head completes once, on its first
// attempt, with no failure.
func TestRenewalKeepsASlowHandlersClaim(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "slow"}}, func(t *testing.T, e *env) {
		const ttl = 30 * time.Second
		started, finish := make(chan struct{}), make(chan struct{})
		var out outcomes
		var runs atomic.Int64
		r := e.start(worker.Config{ID: "w1", TTL: ttl, RenewEvery: 20 * time.Millisecond, Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("slow", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				runs.Add(1)
				close(started)
				select {
				case <-finish:
					return []a2redis.Event{{Type: "done"}}, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}))
		e.append("s", a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "slow"}}})
		<-started
		first := e.clock.Now()
		expires := e.cursor("s", "slow").ClaimExpiresAt
		for e.clock.Now().Sub(first) < 3*ttl {
			// Move to 10s before the lease ends, then wait for a renewal.
			e.clock.Advance(expires.Add(-10 * time.Second).Sub(e.clock.Now()))
			e.eventually("a renewal", func() bool {
				c := e.cursor("s", "slow")
				require.Equal(t, "w1", c.Holder, "the claim is held all along")
				require.Equal(t, int64(1), c.Attempts)
				if c.ClaimExpiresAt.After(expires) {
					expires = c.ClaimExpiresAt
					return true
				}
				return false
			})
		}
		close(finish)
		e.eventually("the completion", func() bool { return len(out.all()) == 1 })
		o := out.all()[0]
		assert.Equal(t, worker.OutcomeCompleted, o.Kind)
		assert.Equal(t, int64(1), o.Head.Attempts)
		require.Len(t, o.Events, 1)
		assert.Equal(t, a2redis.Cause{Consumer: "slow", Index: 1, Attempt: 1}, *o.Events[0].Cause)
		require.NoError(t, r.stop())
		assert.Equal(t, int64(1), runs.Load())
	})
}

// stallable is a renewal gate a test closes and opens.
type stallable struct {
	mu      sync.Mutex
	stalled chan struct{} // non-nil while stalled: closed to resume
	inside  chan struct{} // signalled when a round waits at the gate
}

func newStallable() *stallable { return &stallable{inside: make(chan struct{}, 1)} }

func (s *stallable) gate() {
	s.mu.Lock()
	c := s.stalled
	s.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case s.inside <- struct{}{}:
	default:
	}
	<-c
}

// stall stops renewal: it returns once a renewal round waits at the gate,
// so no round is under way.
func (s *stallable) stall() {
	s.mu.Lock()
	s.stalled = make(chan struct{})
	s.mu.Unlock()
	<-s.inside
}

func (s *stallable) resume() {
	s.mu.Lock()
	close(s.stalled)
	s.stalled = nil
	s.mu.Unlock()
}

// With renewal stalled, the lease lapses and another worker takes the heads
// over: the takeover's completions win (its returned event is the one
// appended, the lane moves on once and in order) and the stale worker's
// late completions are refused by the fence, never applied.
func TestStalledRenewalLosesToTheTakeover(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "ev"}, {Name: "ln"}}, func(t *testing.T, e *env) {
		const ttl = 30 * time.Second
		gate := newStallable()
		var outA, outB outcomes
		var mu sync.Mutex
		order := map[string][]int64{}
		startedA := make(chan string, 2)
		finishA := make(chan struct{})
		handler := func(name string, block bool) func(string) worker.Handler {
			return func(consumer string) worker.Handler {
				return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
					mu.Lock()
					order[name+"/"+consumer] = append(order[name+"/"+consumer], h.Index)
					mu.Unlock()
					if block {
						startedA <- consumer
						<-finishA // ignores its context: a process paused, then resumed
					}
					if consumer == "ev" {
						return []a2redis.Event{{Type: "done", Payload: []byte(`"` + name + `"`)}}, nil
					}
					return nil, nil
				}
			}
		}
		a, b := handler("a", true), handler("b", false)
		// Worker a's two slots hold the two heads, so it claims nothing
		// more: as far as the store can tell, it is paused.
		wA, err := worker.New(e.store, worker.Config{ID: "a", Concurrency: 2, TTL: ttl, RenewEvery: 20 * time.Millisecond, Logger: quiet(), Hooks: worker.Hooks{OnOutcome: outA.hook}},
			worker.Handle("ev", a("ev")), worker.Handle("ln", a("ln")))
		require.NoError(t, err)
		worker.SetRenewGate(wA, gate.gate)
		runA := make(chan error, 1)
		go func() { runA <- wA.Run(e.ctx) }()

		e.append("s",
			a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: "x"}}},
			a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "ln", Lane: "x"}}})
		got := map[string]bool{<-startedA: true, <-startedA: true}
		require.Equal(t, map[string]bool{"ev": true, "ln": true}, got)
		gate.stall()
		e.clock.Advance(ttl + time.Second)

		rB := e.start(worker.Config{ID: "b", TTL: ttl, Hooks: worker.Hooks{OnOutcome: outB.hook}},
			worker.Handle("ev", b("ev")), worker.Handle("ln", b("ln")))
		e.eventually("the takeover completes everything", func() bool { return outB.count(worker.OutcomeCompleted) == 3 && e.idle() })

		close(finishA) // the stale handlers return
		e.eventually("the stale outcomes", func() bool { return len(outA.all()) == 2 })
		for _, o := range outA.all() {
			assert.Equal(t, worker.OutcomeSuperseded, o.Kind, "%s: the stale completion is refused", headName(o.Head))
			assert.Equal(t, int64(1), o.Head.Attempts)
		}
		events, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		var done []a2redis.StoredEvent
		for _, ev := range events {
			if ev.Type == "done" {
				done = append(done, ev)
			}
		}
		require.Len(t, done, 1, "one returned event: the takeover's")
		assert.JSONEq(t, `"b"`, string(done[0].Payload))
		assert.Equal(t, a2redis.Cause{Consumer: "ev", Index: 1, Attempt: 2}, *done[0].Cause)
		mu.Lock()
		assert.Equal(t, map[string][]int64{"a/ev": {1}, "a/ln": {1}, "b/ev": {1}, "b/ln": {1, 2}}, order, "the lane ran in order, its head twice (once per holder)")
		mu.Unlock()
		for _, c := range e.cursors("s") {
			assert.Zero(t, c.Head, "%s/%s is done", c.Consumer, c.Lane)
		}

		gate.resume()
		require.NoError(t, rB.stop())
		require.NoError(t, wA.Shutdown(e.ctx))
		require.NoError(t, <-runA)
	})
}

// A renewal that finds the claim taken over cancels the running handler
// (cause ErrLeaseLost), and nothing it returns is recorded: no second
// failure, no completion.
func TestLostLeaseCancelsTheHandler(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "c"}}, func(t *testing.T, e *env) {
		const ttl = 30 * time.Second
		gate := newStallable()
		var out outcomes
		started := make(chan struct{})
		cause := make(chan error, 1)
		// Concurrency 1: with its one slot taken the worker claims nothing
		// more, so it cannot take its own lapsed claim over once the clock
		// moves (under load its next claim could come after the advance).
		w, err := worker.New(e.store, worker.Config{ID: "a", TTL: ttl, RenewEvery: 20 * time.Millisecond, Concurrency: 1, Logger: quiet(), Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("c", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil, ctx.Err()
			}))
		require.NoError(t, err)
		worker.SetRenewGate(w, gate.gate)
		run := make(chan error, 1)
		go func() { run <- w.Run(e.ctx) }()
		e.append("s", a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "c"}}})
		<-started
		gate.stall()
		e.clock.Advance(ttl + time.Second)
		taken, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "b", TTL: ttl})
		require.NoError(t, err)
		require.Len(t, taken.Heads, 1, "%+v %+v now %v", taken, e.cursor("s", "c"), e.clock.Now())
		assert.Equal(t, int64(2), taken.Heads[0].Attempts)
		gate.resume()
		assert.ErrorIs(t, <-cause, worker.ErrLeaseLost)
		e.eventually("the outcome", func() bool { return len(out.all()) == 1 })
		assert.Equal(t, worker.OutcomeLeaseLost, out.all()[0].Kind)
		c := e.cursor("s", "c")
		assert.Equal(t, "b", c.Holder, "the takeover holds the head")
		assert.Equal(t, int64(2), c.Attempts)
		assert.Equal(t, int64(1), c.Failures, "only the lapsed claim's takeover counted a failure")
		require.NoError(t, w.Shutdown(e.ctx))
		require.NoError(t, <-run)
	})
}
