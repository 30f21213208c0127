package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// One worker runs an event consumer, a lane consumer and a typed log
// consumer over many sessions: every (consumer, event) is handled exactly
// once, lanes in order, the returned events are appended once with their
// cause, and nothing is left.
func TestRunsEveryKindOfConsumer(t *testing.T) {
	each(t, everyone, func(t *testing.T, e *env) {
		var (
			mu    sync.Mutex
			runs  = map[string]int{}
			lanes = map[string][]int64{}
		)
		record := func(h a2redis.HeadEvent) {
			mu.Lock()
			defer mu.Unlock()
			runs[headName(h)]++
			if h.Kind == a2redis.LaneCursor {
				key := h.Session + "/" + h.Lane
				lanes[key] = append(lanes[key], h.Index)
			}
		}
		var out outcomes
		e.start(worker.Config{Concurrency: 8, Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				record(h)
				if h.Type == "order.placed" {
					return []a2redis.Event{{Type: "email.sent", Payload: h.Payload}}, nil
				}
				return nil, nil
			}),
			worker.Handle("billing", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				record(h)
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				return nil, nil
			}),
			worker.Handle("auditor", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				record(h)
				return nil, nil
			}),
		)
		const sessions = 20
		want := map[string]int{}
		for i := range sessions {
			session := fmt.Sprintf("order-%d", i)
			lane := fmt.Sprintf("acct-%d", i%3)
			res := e.append(session,
				a2redis.Event{Type: "order.placed", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: lane}}},
				a2redis.Event{Type: "order.paid", Targets: []a2redis.Target{{Consumer: "billing", Lane: lane}}},
				a2redis.Event{Type: "order.shipped", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: lane}}},
			)
			ev := res.Events
			want[fmt.Sprintf("%s/mailer//%d", session, ev[0].Index)] = 1
			want[fmt.Sprintf("%s/mailer//%d", session, ev[2].Index)] = 1
			for _, x := range ev {
				want[fmt.Sprintf("%s/billing/%s/%d", session, lane, x.Index)] = 1
			}
			want[fmt.Sprintf("%s/auditor/audit/%d", session, ev[1].Index)] = 1
		}
		e.eventually("every head handled", func() bool {
			mu.Lock()
			n := len(runs)
			mu.Unlock()
			return n == len(want) && e.idle()
		})
		mu.Lock()
		assert.Equal(t, want, runs, "every (consumer, event) ran exactly once")
		for key, order := range lanes {
			assert.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }), "lane %s ran in order: %v", key, order)
		}
		mu.Unlock()
		for i := range sessions {
			session := fmt.Sprintf("order-%d", i)
			for _, c := range e.cursors(session) {
				assert.Zero(t, c.Head, "session %s: cursor %s/%s has nothing left", session, c.Consumer, c.Lane)
			}
			events, err := e.store.Read(e.ctx, session, 0, 0)
			require.NoError(t, err)
			sent := 0
			for _, ev := range events {
				if ev.Type == "email.sent" {
					sent++
					require.NotNil(t, ev.Cause)
					assert.Equal(t, a2redis.Cause{Consumer: "mailer", Index: 1, Attempt: 1}, *ev.Cause)
					assert.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(ev.Payload))
				}
			}
			assert.Equal(t, 1, sent, "session %s: the returned event was appended once", session)
		}
		assert.Equal(t, map[worker.OutcomeKind]int{worker.OutcomeCompleted: len(want)}, out.kinds())
	})
}

// Concurrency bounds the handlers in flight in the worker, MaxInFlight one
// consumer's; both are reached when there is enough work. The fast
// consumer's handlers hold until Concurrency handlers run at once, so the
// peak does not depend on how fast the machine runs them; the slow ones do
// not hold (a head beyond MaxInFlight waits in the worker holding its slot,
// so held slow handlers could keep the worker below Concurrency), and once
// they are all done the fast heads of ten sessions fill every slot.
func TestConcurrencyBounds(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "fast"}, {Name: "slow"}}, func(t *testing.T, e *env) {
		var inFlight, peak, slowIn, slowPeak atomic.Int64
		bump := func(cur, top *atomic.Int64) func() {
			n := cur.Add(1)
			for {
				p := top.Load()
				if n <= p || top.CompareAndSwap(p, n) {
					break
				}
			}
			return func() { cur.Add(-1) }
		}
		const concurrency, slowLimit = 6, 2
		var done atomic.Int64
		full, fill := make(chan struct{}), sync.Once{}
		handler := func(slow bool) worker.Handler {
			return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				defer bump(&inFlight, &peak)()
				if slow {
					defer bump(&slowIn, &slowPeak)()
				}
				if peak.Load() >= concurrency {
					fill.Do(func() { close(full) })
				}
				if !slow {
					select {
					case <-full:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				time.Sleep(3 * time.Millisecond)
				done.Add(1)
				return nil, nil
			}
		}
		e.start(worker.Config{Concurrency: concurrency},
			worker.Handle("fast", handler(false)),
			worker.Handle("slow", handler(true), worker.MaxInFlight(slowLimit)))
		const sessions, perSession = 10, 8
		for i := range sessions {
			batch := make([]a2redis.Event, perSession)
			for j := range batch {
				batch[j] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "fast"}, {Consumer: "slow"}}}
			}
			e.append(fmt.Sprintf("s%d", i), batch...)
		}
		e.eventually("all handled", func() bool { return done.Load() == 2*sessions*perSession && e.idle() })
		// Never more than the bounds; Concurrency reached (more at once
		// than one consumer's bound allows).
		t.Logf("peak %d of %d, slow peak %d of %d", peak.Load(), concurrency, slowPeak.Load(), slowLimit)
		assert.Equal(t, int64(concurrency), peak.Load(), "the worker filled Concurrency slots and never ran more handlers at once")
		assert.LessOrEqual(t, slowPeak.Load(), int64(slowLimit), "the slow consumer never ran more than MaxInFlight handlers at once")
		assert.Positive(t, slowPeak.Load())
	})
}

// Middleware wraps every handler in order (the worker's outside the
// consumer's) and sees a panic as the handler's error; the hooks see the
// lifecycle and every outcome; the error handler gets every failure.
func TestMiddlewareAndHooks(t *testing.T) {
	each(t, nil, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var trace []string
		note := func(s string) {
			mu.Lock()
			trace = append(trace, s)
			mu.Unlock()
		}
		layer := func(name string) worker.Middleware {
			return func(next worker.Handler) worker.Handler {
				return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
					note(name + ">")
					ev, err := next(ctx, h)
					var p *worker.PanicError
					if errors.As(err, &p) {
						note(name + "<panic")
					} else {
						note(name + "<")
					}
					return ev, err
				}
			}
		}
		started, stopped := make(chan struct{}), make(chan error, 1)
		var out outcomes
		var handled []error
		r := e.start(worker.Config{
			Middleware: []worker.Middleware{layer("outer"), layer("inner")},
			Hooks: worker.Hooks{
				OnStart:   func(context.Context) { close(started) },
				OnOutcome: out.hook,
				OnStop:    func(err error) { stopped <- err },
			},
			ErrorHandler: func(_ context.Context, h *a2redis.HeadEvent, err error) {
				mu.Lock()
				handled = append(handled, err)
				mu.Unlock()
			},
		}, worker.Handle("c", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			note("handler")
			if h.Type == "boom" {
				panic("boom")
			}
			return nil, nil
		}, worker.WithMiddleware(layer("own"))))
		<-started
		e.append("s", a2redis.Event{Type: "ok", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}})
		e.eventually("the first head", func() bool { return out.count(worker.OutcomeCompleted) == 1 })
		e.append("s", a2redis.Event{Type: "boom", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}})
		e.eventually("the panic", func() bool { return out.count(worker.OutcomeFailed) == 1 })
		require.NoError(t, r.stop())
		assert.NoError(t, <-stopped)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{
			"outer>", "inner>", "own>", "handler", "own<", "inner<", "outer<",
			"outer>", "inner>", "own>", "handler", "own<panic", "inner<panic", "outer<panic",
		}, trace)
		require.Len(t, handled, 1)
		var p *worker.PanicError
		require.ErrorAs(t, handled[0], &p)
		assert.Equal(t, "boom", p.Value)
	})
}

// New refuses what cannot work before anything runs, and a worker runs
// once.
func TestNewRefusesBadConfig(t *testing.T) {
	_, client := redistest.Miniredis(t)
	e := newEnv(t, client, everyone, false)
	noop := func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }
	ok := worker.Handle("mailer", noop)
	for name, build := range map[string]func() (*worker.Worker, error){
		"no store":    func() (*worker.Worker, error) { return worker.New(nil, worker.Config{}, ok) },
		"no handlers": func() (*worker.Worker, error) { return worker.New(e.store, worker.Config{}) },
		"undeclared consumer": func() (*worker.Worker, error) {
			return worker.New(e.store, worker.Config{}, worker.Handle("nobody", noop))
		},
		"consumer twice": func() (*worker.Worker, error) { return worker.New(e.store, worker.Config{}, ok, ok) },
		"nil handler": func() (*worker.Worker, error) {
			return worker.New(e.store, worker.Config{}, worker.Handle("mailer", nil))
		},
		"empty consumer":       func() (*worker.Worker, error) { return worker.New(e.store, worker.Config{}, worker.Handle("", noop)) },
		"negative concurrency": func() (*worker.Worker, error) { return worker.New(e.store, worker.Config{Concurrency: -1}, ok) },
		"renewal too rare": func() (*worker.Worker, error) {
			return worker.New(e.store, worker.Config{TTL: 30 * time.Second, RenewEvery: 20 * time.Second}, ok)
		},
		"stop deadline before the timeout": func() (*worker.Worker, error) {
			return worker.New(e.store, worker.Config{StopTimeout: time.Minute, StopDeadline: time.Second}, ok)
		},
		"negative MaxInFlight": func() (*worker.Worker, error) {
			return worker.New(e.store, worker.Config{}, worker.Handle("mailer", noop, worker.MaxInFlight(-1)))
		},
	} {
		w, err := build()
		assert.Nil(t, w, name)
		assert.ErrorIs(t, err, a2redis.ErrInvalidArgument, name)
	}

	w, err := worker.New(e.store, worker.Config{Logger: quiet()}, ok)
	require.NoError(t, err)
	assert.NotEmpty(t, w.ID(), "a default holder name")
	require.NoError(t, w.Shutdown(e.ctx), "a shutdown before Run")
	assert.NoError(t, w.Run(e.ctx), "Run after a shutdown returns at once")
	assert.ErrorIs(t, w.Run(e.ctx), worker.ErrRunning)
}

// Workers split a deployment's consumers: each claims only the consumers
// it handles, and a consumer nobody handles keeps its work. With no
// consumers declared, a worker claims only the ones it handles too.
func TestWorkersSplitConsumers(t *testing.T) {
	for _, declared := range [][]a2redis.Consumer{everyone, nil} {
		t.Run(fmt.Sprintf("declared=%d", len(declared)), func(t *testing.T) {
			each(t, declared, func(t *testing.T, e *env) {
				var mu sync.Mutex
				seen := map[string][]string{}
				handler := func(worker string) worker.Handler {
					return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
						mu.Lock()
						seen[worker] = append(seen[worker], h.Consumer)
						mu.Unlock()
						return nil, nil
					}
				}
				e.start(worker.Config{ID: "a"}, worker.Handle("mailer", handler("a")))
				e.start(worker.Config{ID: "b"}, worker.Handle("billing", handler("b")))
				const n = 10
				for i := range n {
					e.append(fmt.Sprintf("s%d", i), a2redis.Event{Type: "order.paid", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: "x"}}})
				}
				e.eventually("mailer and billing done", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(seen["a"]) == n && len(seen["b"]) == n
				})
				mu.Lock()
				for w, consumers := range seen {
					for _, c := range consumers {
						assert.Equal(t, map[string]string{"a": "mailer", "b": "billing"}[w], c, "worker %s ran only its consumer", w)
					}
				}
				mu.Unlock()
				if declared != nil {
					// The auditor (declared, typed log) has no worker: its
					// heads wait, unclaimed.
					for i := range n {
						c := e.cursor(fmt.Sprintf("s%d", i), "auditor")
						assert.Empty(t, c.Holder)
						assert.Zero(t, c.Attempts)
					}
				}
			})
		})
	}
}

// An AllConsumers worker claims without naming consumers (the store's
// fastest claims): its consumers' heads run, and a head of a consumer it
// has no handler for fails with ErrNoHandler, counted like any failure.
func TestAllConsumers(t *testing.T) {
	each(t, nil, func(t *testing.T, e *env) {
		var out outcomes
		var ran atomic.Int64
		e.start(worker.Config{AllConsumers: true, Hooks: worker.Hooks{OnOutcome: out.hook}},
			worker.Handle("known", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				ran.Add(1)
				return nil, nil
			}))
		e.append("s", a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "known"}, {Consumer: "unknown"}}})
		e.eventually("both outcomes", func() bool { return len(out.all()) == 2 })
		assert.Equal(t, map[worker.OutcomeKind]int{worker.OutcomeCompleted: 1, worker.OutcomeFailed: 1}, out.kinds())
		assert.Equal(t, int64(1), ran.Load())
		for _, o := range out.all() {
			if o.Kind == worker.OutcomeFailed {
				assert.ErrorIs(t, o.Err, worker.ErrNoHandler)
			}
		}
		c := e.cursor("s", "unknown")
		assert.Equal(t, int64(1), c.Failures)
		assert.Equal(t, `worker: no handler for consumer "unknown"`, c.LastError)
	})
}

// A server that refuses the work channels' subscription (sharded pub/sub
// on miniredis) ends Run with the error instead of leaving a worker that
// would never hear of work.
func TestRunFailsWhenTheWorkChannelsAreRefused(t *testing.T) {
	_, client := redistest.Miniredis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), ShardedPubSub: true})
	require.NoError(t, err)
	w, err := worker.New(store, worker.Config{Logger: quiet()}, worker.Handle("c", func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }))
	require.NoError(t, err)
	err = w.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "watching for work")
}
