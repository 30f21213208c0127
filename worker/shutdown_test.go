package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/worker"
)

// A graceful stop under load: the worker stops claiming, lets handlers
// finish for StopTimeout, cancels the rest and releases their claims; the
// store then holds no claim and counts no failure, and a second worker
// finishes the work. Every (consumer, event) succeeds exactly once, lanes
// in order, nothing is lost, no failure is counted.
func TestGracefulStopUnderLoad(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "ev"}, {Name: "ln"}}, func(t *testing.T, e *env) {
		const sessions, perSession = 40, 10
		var mu sync.Mutex
		successes := map[string]int{}
		laneOrder := map[string][]int64{}
		// One head outruns any StopTimeout on its first run, so the stop
		// surely has a handler to cancel and a claim to release.
		var slowOnce sync.Once
		slowRunning := make(chan struct{})
		handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			wait := time.Duration(2+rand.IntN(30)) * time.Millisecond
			if h.Session == "s0" && h.Consumer == "ev" && h.Index == 3 {
				slowOnce.Do(func() {
					wait = time.Hour
					close(slowRunning)
				})
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			mu.Lock()
			successes[headName(h)]++
			if h.Lane != "" {
				laneOrder[h.Session+"/"+h.Lane] = append(laneOrder[h.Session+"/"+h.Lane], h.Index)
			}
			mu.Unlock()
			if h.Consumer == "ev" && h.Index%2 == 1 {
				return []a2redis.Event{{Type: "ev.done"}}, nil
			}
			return nil, nil
		}
		done := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(successes)
		}
		var outA, outB outcomes
		a := e.start(worker.Config{ID: "a", Concurrency: 16, StopTimeout: 10 * time.Millisecond, Hooks: worker.Hooks{OnOutcome: outA.hook}},
			worker.Handle("ev", handler), worker.Handle("ln", handler))
		for i := range sessions {
			batch := make([]a2redis.Event, perSession)
			for j := range batch {
				batch[j] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: fmt.Sprintf("L%d", j%2)}}}
			}
			e.append(fmt.Sprintf("s%d", i), batch...)
		}
		const total = 2 * sessions * perSession
		e.eventually("a third handled, the slow head running", func() bool {
			select {
			case <-slowRunning:
				return done() >= total/3
			default:
				return false
			}
		})
		require.NoError(t, a.stop(), "a clean stop")
		kindsA := outA.kinds()
		t.Logf("worker a: %v", kindsA)
		assert.Positive(t, kindsA[worker.OutcomeReleased], "the stop cancelled handlers that outran StopTimeout and released their claims")
		for kind := range kindsA {
			assert.Contains(t, []worker.OutcomeKind{worker.OutcomeCompleted, worker.OutcomeReleased}, kind)
		}
		left := 0
		for i := range sessions {
			for _, c := range e.cursors(fmt.Sprintf("s%d", i)) {
				if c.Head == 0 {
					continue
				}
				left++
				assert.Empty(t, c.Holder, "s%d %s/%s: no claim left held", i, c.Consumer, c.Lane)
				assert.Zero(t, c.Failures, "s%d %s/%s: no failure counted", i, c.Consumer, c.Lane)
			}
		}
		assert.Positive(t, left, "work is left for the next worker")

		e.start(worker.Config{ID: "b", Hooks: worker.Hooks{OnOutcome: outB.hook}}, worker.Handle("ev", handler), worker.Handle("ln", handler))
		e.eventually("everything handled", func() bool { return done() == total && e.idle() })
		mu.Lock()
		for name, n := range successes {
			assert.Equal(t, 1, n, "%s succeeded once", name)
		}
		for lane, order := range laneOrder {
			assert.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }), "lane %s in order: %v", lane, order)
			assert.Len(t, order, perSession/2)
		}
		mu.Unlock()
		for _, o := range outB.all() {
			assert.Equal(t, worker.OutcomeCompleted, o.Kind)
			assert.Zero(t, o.Head.Failures, "%s: no failure was ever counted", headName(o.Head))
		}
		for i := range sessions {
			session := fmt.Sprintf("s%d", i)
			for _, c := range e.cursors(session) {
				assert.Zero(t, c.Head, "%s %s/%s is done", session, c.Consumer, c.Lane)
			}
			events, err := e.store.Read(e.ctx, session, 0, 0)
			require.NoError(t, err)
			returned := map[int64]int{}
			for _, ev := range events {
				if ev.Type == "ev.done" {
					returned[ev.Cause.Index]++
				}
			}
			assert.Len(t, returned, perSession/2, "%s: one returned event per odd head", session)
			for idx, n := range returned {
				assert.Equal(t, 1, n, "%s #%d: returned once", session, idx)
			}
		}
		t.Logf("worker b: %v", outB.kinds())
	})
}

// The hard deadline bounds a stop whose handler ignores its cancelled
// context: Run returns ErrStopDeadline, and the claim is left to lapse.
func TestStopDeadline(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "stuck"}}, func(t *testing.T, e *env) {
		started, unblock := make(chan struct{}), make(chan struct{})
		defer close(unblock)
		r := e.start(worker.Config{StopTimeout: time.Millisecond, StopDeadline: 50 * time.Millisecond},
			worker.Handle("stuck", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				close(started)
				<-unblock
				return nil, nil
			}))
		e.append("s", a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "stuck"}}})
		<-started
		err := r.stop()
		require.ErrorIs(t, err, worker.ErrStopDeadline)
		assert.Contains(t, err.Error(), "1 claims left to lapse")
		assert.Equal(t, r.w.ID(), e.cursor("s", "stuck").Holder, "the claim stays until its lease ends")
	})
}
