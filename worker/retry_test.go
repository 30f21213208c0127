package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// outcomesOf returns the outcomes reported for consumer, in order.
func (o *outcomes) of(consumer string) []worker.Outcome {
	var out []worker.Outcome
	for _, x := range o.all() {
		if x.Head.Consumer == consumer {
			out = append(out, x)
		}
	}
	return out
}

// The retry paths, each checked in the store with its test clock: the
// default backoff's hold, a custom backoff up to MaxFailures and the dead
// letter, a permanent error, a snooze and a panic.
func TestRetryPaths(t *testing.T) {
	consumers := []a2redis.Consumer{{Name: "flaky"}, {Name: "custom"}, {Name: "permanent"}, {Name: "snoozer"}, {Name: "panicky"}}
	each(t, consumers, func(t *testing.T, e *env) {
		var out outcomes
		var flakyRuns, snoozeRuns atomic.Int64
		r := e.start(worker.Config{MaxFailures: 3, Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("flaky", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				if flakyRuns.Add(1) == 1 {
					return nil, errors.New("smtp: connection refused")
				}
				return nil, nil
			}),
			worker.Handle("custom", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				return nil, fmt.Errorf("still down (attempt %d)", h.Attempts)
			}, worker.WithBackoff(func(failures int64, err error) time.Duration { return time.Duration(failures) * 7 * time.Second })),
			worker.Handle("permanent", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				return nil, worker.Permanent(errors.New("bad payload"))
			}),
			worker.Handle("snoozer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				if snoozeRuns.Add(1) == 1 {
					return nil, worker.Snooze(90 * time.Second)
				}
				return nil, nil
			}),
			worker.Handle("panicky", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				var m map[string]int
				//lint:ignore SA5000 the handler panics on purpose
				m["kaboom"]++ // a nil map write panics
				return nil, nil
			}),
		)
		for _, c := range consumers {
			e.append(c.Name, a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: c.Name}}})
		}
		waitFor := func(consumer string, n int) []worker.Outcome {
			t.Helper()
			e.eventually(fmt.Sprintf("%d outcomes of %s", n, consumer), func() bool { return len(out.of(consumer)) >= n })
			got := out.of(consumer)
			require.Len(t, got, n, "%s: no outcome beyond the expected ones", consumer)
			return got
		}

		// The default backoff: 1s ±20% after the first failure.
		got := waitFor("flaky", 1)
		assert.Equal(t, worker.OutcomeFailed, got[0].Kind)
		assert.EqualError(t, got[0].Err, "smtp: connection refused")
		c := e.cursor("flaky", "flaky")
		assert.Equal(t, int64(1), c.Failures)
		assert.Equal(t, "smtp: connection refused", c.LastError)
		assert.Empty(t, c.Holder, "the claim is released")
		hold := c.ClaimExpiresAt.Sub(e.clock.Now())
		assert.Equal(t, hold.Milliseconds(), got[0].RetryAfter.Milliseconds(), "held for the backoff the policy gave")
		assert.True(t, hold >= 800*time.Millisecond && hold <= 1200*time.Millisecond, "default backoff after one failure is 1s ±20%%: %v", hold)

		// A permanent error dead-letters at once.
		got = waitFor("permanent", 1)
		assert.Equal(t, worker.OutcomeDeadLettered, got[0].Kind)
		assert.ErrorIs(t, got[0].Err, worker.ErrPermanent)
		assert.Equal(t, int64(1), got[0].Failures)
		dead, err := e.store.DeadLetters(e.ctx, "permanent")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, "bad payload", dead[0].LastError)
		assert.Equal(t, int64(1), dead[0].Failures)

		// A snooze holds the head without a failure.
		got = waitFor("snoozer", 1)
		assert.Equal(t, worker.OutcomeSnoozed, got[0].Kind)
		assert.Equal(t, 90*time.Second, got[0].RetryAfter)
		c = e.cursor("snoozer", "snoozer")
		assert.Zero(t, c.Failures, "a snooze counts no failure")
		assert.True(t, e.clock.Now().Add(90*time.Second).Equal(c.ClaimExpiresAt), "held for the snooze: %v", c.ClaimExpiresAt.Sub(e.clock.Now()))
		assert.Empty(t, c.Holder)

		// A panic is a failure recorded with its stack.
		got = waitFor("panicky", 1)
		assert.Equal(t, worker.OutcomeFailed, got[0].Kind)
		var p *worker.PanicError
		require.ErrorAs(t, got[0].Err, &p)
		c = e.cursor("panicky", "panicky")
		assert.Equal(t, int64(1), c.Failures)
		assert.Contains(t, c.LastError, "panic: assignment to entry in nil map")
		assert.Contains(t, c.LastError, "goroutine ")
		assert.Contains(t, c.LastError, "retry_test.go", "the stack names the handler")

		// The custom backoff: 7s after the first failure.
		got = waitFor("custom", 1)
		assert.Equal(t, worker.OutcomeFailed, got[0].Kind)
		c = e.cursor("custom", "custom")
		assert.True(t, e.clock.Now().Add(7*time.Second).Equal(c.ClaimExpiresAt), "held 7s: %v", c.ClaimExpiresAt.Sub(e.clock.Now()))

		// Time passes: the flaky head runs again and completes, the snooze
		// is not over yet, the custom head fails again (14s).
		e.clock.Advance(8 * time.Second)
		worker.Poke(r.w)
		got = waitFor("flaky", 2)
		assert.Equal(t, worker.OutcomeCompleted, got[1].Kind)
		assert.Equal(t, int64(2), got[1].Head.Attempts)
		assert.Equal(t, int64(1), got[1].Head.Failures, "the handler sees the failure count")
		got = waitFor("custom", 2)
		assert.Equal(t, worker.OutcomeFailed, got[1].Kind)
		c = e.cursor("custom", "custom")
		assert.Equal(t, int64(2), c.Failures)
		assert.Equal(t, "still down (attempt 2)", c.LastError)
		assert.True(t, e.clock.Now().Add(14*time.Second).Equal(c.ClaimExpiresAt), "held 14s: %v", c.ClaimExpiresAt.Sub(e.clock.Now()))
		// The panicky head's second failure happens before the clock moves
		// on again: its backoff (4s) must start at this time, or its third
		// run would fall after the last advance and never come.
		got = waitFor("panicky", 2)
		assert.Equal(t, worker.OutcomeFailed, got[1].Kind)

		e.clock.Advance(90 * time.Second)
		worker.Poke(r.w)
		// Third failure of custom: MaxFailures (3) dead-letters it.
		got = waitFor("custom", 3)
		assert.Equal(t, worker.OutcomeDeadLettered, got[2].Kind)
		assert.Equal(t, int64(3), got[2].Failures)
		dead, err = e.store.DeadLetters(e.ctx, "custom")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, "still down (attempt 3)", dead[0].LastError)
		// The snoozed head ran again: a new attempt, still no failure.
		got = waitFor("snoozer", 2)
		assert.Equal(t, worker.OutcomeCompleted, got[1].Kind)
		assert.Equal(t, int64(2), got[1].Head.Attempts)
		assert.Zero(t, got[1].Head.Failures)
		// The panicky head failed again after each backoff, and its third
		// failure dead-lettered it.
		got = waitFor("panicky", 3)
		assert.Equal(t, []worker.OutcomeKind{worker.OutcomeFailed, worker.OutcomeFailed, worker.OutcomeDeadLettered}, []worker.OutcomeKind{got[0].Kind, got[1].Kind, got[2].Kind})
		require.NoError(t, r.stop())
		assert.Equal(t, int64(2), flakyRuns.Load())
		assert.Equal(t, int64(2), snoozeRuns.Load())
	})
}

// The default policy's documented shape: 1s × 4^(failures−1), capped at
// 5 min, within ±20%.
func TestDefaultBackoff(t *testing.T) {
	for failures, want := range map[int64]time.Duration{1: time.Second, 2: 4 * time.Second, 3: 16 * time.Second, 4: 64 * time.Second, 5: 256 * time.Second, 6: 5 * time.Minute, 60: 5 * time.Minute} {
		for range 50 {
			got := worker.DefaultBackoff(failures, nil)
			assert.True(t, got >= want*8/10 && got <= want*12/10, "failures %d: %v not within 20%% of %v", failures, got, want)
		}
	}
	exact := worker.Exponential(time.Second, 2, time.Minute, 0)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, time.Minute}, []time.Duration{exact(1, nil), exact(2, nil), exact(3, nil), exact(100, nil)})
}

// WithTimeout bounds a run: the handler's context ends, and the run fails
// with the deadline, counted like any failure.
func TestHandlerTimeout(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "slow"}}, func(t *testing.T, e *env) {
		var out outcomes
		e.start(worker.Config{Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("slow", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}, worker.WithTimeout(20*time.Millisecond)))
		e.append("s", a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "slow"}}})
		e.eventually("the failure", func() bool { return len(out.all()) == 1 })
		o := out.all()[0]
		assert.Equal(t, worker.OutcomeFailed, o.Kind)
		assert.ErrorIs(t, o.Err, context.DeadlineExceeded)
		c := e.cursor("s", "slow")
		assert.Equal(t, int64(1), c.Failures)
		assert.Equal(t, context.DeadlineExceeded.Error(), c.LastError)
	})
}

// opCounter is a store Observer that counts the operations begun, by name,
// and keeps the errors they ended with.
type opCounter struct {
	mu   sync.Mutex
	n    map[string]int
	errs map[string][]error
}

func (c *opCounter) Begin(ctx context.Context, op redisstore.Operation) (context.Context, func(redisstore.OperationEnd)) {
	c.mu.Lock()
	c.n[op.Name]++
	c.mu.Unlock()
	return ctx, func(end redisstore.OperationEnd) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.errs[op.Name] = append(c.errs[op.Name], end.Err)
	}
}

func (c *opCounter) TraceContext(context.Context) string { return "" }

func (c *opCounter) count(name string) (int, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name], slices.Clone(c.errs[name])
}

// The store's Config.Retries is the one retry layer: a completion the
// server keeps refusing (NOREPLICAS: min-replicas-to-write with no
// replica) is one store call — which retries it as its RetryPolicy says —
// and then the outcome OutcomeWriteFailed, not further calls of the worker's own.
// The server is a private one: the refusal is a server setting.
func TestOneRetryLayer(t *testing.T) {
	t.Parallel()
	in := redistest.SpawnServer(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ops := &opCounter{n: map[string]int{}, errs: map[string][]error{}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	store, err := redisstore.New(ctx, client, redisstore.Config{
		Prefix: redistest.Prefix(t), Observer: ops,
		Retries: redisstore.RetryPolicy{Attempts: 3, Unavailable: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	})
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, store: store, client: client, prefix: store.Prefix()}

	refuse := func(on bool) {
		t.Helper()
		n := "0"
		if on {
			n = "1"
		}
		require.NoError(t, client.Do(ctx, client.B().ConfigSet().ParameterValue().ParameterValue("min-replicas-to-write", n).Build()).Error())
	}
	var out outcomes
	entered, proceed := make(chan struct{}), make(chan struct{})
	r := e.start(worker.Config{Concurrency: 1, TTL: time.Minute, MaxWait: time.Minute, RepairEvery: -1, Hooks: worker.Hooks{OnOutcome: out.hook}},
		worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			close(entered)
			<-proceed
			return nil, nil
		}))
	e.append("s", a2redis.Event{Type: "job", Targets: []a2redis.Target{{Consumer: "mailer"}}})
	<-entered
	refuse(true)
	close(proceed)
	e.eventually("the completion's outcome", func() bool { return len(out.all()) == 1 })
	refuse(false)

	o := out.all()[0]
	assert.Equal(t, worker.OutcomeWriteFailed, o.Kind)
	assert.ErrorIs(t, o.Err, a2redis.ErrUnavailable)
	calls, errs := ops.count(redisstore.OpComplete)
	assert.Equal(t, 1, calls, "the worker asked the store once; the store did the retrying")
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], a2redis.ErrUnavailable)
	assert.Contains(t, errs[0].Error(), "NOREPLICAS")
	require.NoError(t, r.stop())
}
