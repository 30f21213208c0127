package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// The small-session rows (issue 33): the worker runtime with its default
// settings over many sessions of a few events each, and over sessions that
// are created, handled and ended at a steady rate (churn), beside asynq,
// whose task is such a short life.
const (
	// smallSessions is the session count of the shape rows at scale 1;
	// it scales with the run, to smallMinSessions at least.
	smallSessions    = 10_000
	smallMinSessions = 100
	// smallReference is the asynq row the shape rows are set beside.
	smallReference = "asynq/process/concurrency=16"

	// churnRate is the churn row's fixed rate: sessions created (one
	// event each) per second.
	churnRate = 500
	// churnDuration is how long the churn row creates sessions at scale
	// 1; it scales with the run, to churnMinDuration at least.
	churnDuration    = 60 * time.Second
	churnMinDuration = 5 * time.Second
	// churnIdleFor and churnRetentionEvery are the churn worker's
	// retention: a handled session is dropped once its event is
	// churnIdleFor old, by passes every churnRetentionEvery.
	churnIdleFor        = time.Second
	churnRetentionEvery = time.Second
	// churnDrain bounds the wait, after the last session was handled,
	// for the retention to drop every session.
	churnDrain = 30 * time.Second
)

// smallShapes are the events per session of the shape rows.
var smallShapes = []int{1, 2, 5, 20}

func smallScenarios() []*scenario {
	var list []*scenario
	for _, k := range smallShapes {
		list = append(list, &scenario{
			id:     smallID(k),
			system: SystemA2, kind: KindProcess,
			title: fmt.Sprintf("worker runtime, default settings (Concurrency %d; AllConsumers), an event consumer over %s sessions "+
				"of %s each (sessions scale with the run, at least %d; always %s per session): the backlog appended 1 event per call, "+
				"then drained",
				worker.DefaultConcurrency, thousands(smallSessions), eventsText(k), smallMinSessions, eventsText(k)),
			events: smallSessions * k, ceiling: "streams/group", asynq: smallReference,
			count: func(h *harness) int { return h.smallSessionCount() * k },
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return workerSmallSessions(ctx, h, n, k)
			},
		})
	}
	// Two worker processes (two stores, each with its own client state and
	// ready-index lines) over the one-event shape: what one process's
	// claims cost the other (a session the other claimed that it meets in
	// the index).
	list = append(list, &scenario{
		id:     smallID(1) + "/workers=2",
		system: SystemA2, kind: KindProcess,
		title: fmt.Sprintf("two worker runtimes (two stores on one prefix, default settings: Concurrency %d each; AllConsumers), "+
			"an event consumer over %s sessions of 1 event each: the backlog appended 1 event per call, then drained by both",
			worker.DefaultConcurrency, thousands(smallSessions)),
		events: smallSessions, ceiling: "streams/group", asynq: smallReference,
		count: func(h *harness) int { return h.smallSessionCount() },
		run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
			st, prefix, err := h.workerStore(ctx, nil)
			if err != nil {
				return Measurement{}, err
			}
			second, err := redisstore.New(ctx, h.client, redisstore.Config{Prefix: prefix})
			if err != nil {
				return Measurement{}, fmt.Errorf("a2bench: redisstore.New: %w", err)
			}
			names := sessionNames(n)
			m, err := h.a2Process(ctx, st, prefix, n, n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
				return names[i], a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer}}}
			}, func(ctx context.Context) (int64, int64, error) {
				handled, err := runWorkers(ctx, []*redisstore.Store{st, second}, a2Consumer, n, noop)
				return handled, 0, err
			})
			if m.Notes == nil {
				m.Notes = map[string]float64{}
			}
			m.Notes["sessions"] = float64(n)
			m.Notes["events_per_session"] = 1
			return m, err
		},
	})
	list = append(list, &scenario{
		id:     fmt.Sprintf("a2redis/worker/churn/sessions-per-sec=%d", churnRate),
		system: SystemA2, kind: KindLatency,
		title: fmt.Sprintf("churn: a producer creates %d sessions/s, each with 1 event for an event consumer, for %v (at scale 1; "+
			"scaled, at least %v); a worker with default settings (Concurrency %d; AllConsumers) handles them and ends them with its "+
			"retention (Config.Retention: Drop, IdleFor %v, RetentionEvery %v). 1 event per session, so the per-event costs are per "+
			"session, end to end (append, claim, completion, the retention's scan and drop, and the worker's background reads); "+
			"latency: append → handler start; used_memory at the start, when the last session was handled, and once the "+
			"retention dropped every session",
			churnRate, churnDuration, churnMinDuration, worker.DefaultConcurrency, churnIdleFor, churnRetentionEvery),
		events: churnRate * int(churnDuration/time.Second), asynq: "asynq/latency",
		count: func(h *harness) int { return h.churnSessionCount() },
		run:   workerChurn,
	})
	return list
}

// smallID is the id of the shape row of k events per session.
func smallID(k int) string {
	return fmt.Sprintf("a2redis/worker/small-sessions/events=%d", k)
}

// smallSessionCount is the shape rows' session count at the run's scale.
func (h *harness) smallSessionCount() int { return h.scaled(smallSessions, smallMinSessions) }

// churnSessionCount is the churn row's session count at the run's scale:
// churnRate × the scaled duration.
func (h *harness) churnSessionCount() int {
	d := max(time.Duration(float64(churnDuration)*h.opts.Scale), churnMinDuration)
	return int(d.Seconds() * churnRate)
}

func eventsText(n int) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}

// thousands formats n with thousands separators: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// workerSmallSessions runs the worker's event-cursor drain over n/k
// sessions of k events each (n is a multiple of k).
func workerSmallSessions(ctx context.Context, h *harness, n, k int) (Measurement, error) {
	sessions := n / k
	if sessions == 0 || sessions*k != n {
		return Measurement{}, fmt.Errorf("a2bench: %d events are not %d per session", n, k)
	}
	m, err := workerEventCursors(ctx, h, n, sessions)
	if err != nil {
		return m, err
	}
	if m.Notes == nil {
		m.Notes = map[string]float64{}
	}
	m.Notes["sessions"] = float64(sessions)
	m.Notes["events_per_session"] = float64(k)
	return m, nil
}

// churnSession parses the number of a churn session's name ("churn-<i>").
func churnSession(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "churn-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

// workerChurn creates n sessions of one event each at churnRate sessions/s
// while a worker with default settings and a dropping retention runs, and
// measures from the first append until the retention dropped every
// session: the cost of whole short lives, per session.
func workerChurn(ctx context.Context, h *harness, n int) (Measurement, error) {
	st, _, err := h.workerStore(ctx, nil)
	if err != nil {
		return Measurement{}, err
	}
	clk := newClock()
	appended := make(stamps, n)
	started := make([]atomic.Bool, n)
	rec := newRecorder(n)
	var completed, dropped, passes, reruns, changed, skipped atomic.Int64
	running := make(chan struct{})
	w, err := worker.New(st, worker.Config{
		AllConsumers:   true,
		Retention:      &redisstore.RetentionPolicy{IdleFor: churnIdleFor, Drop: true},
		RetentionEvery: churnRetentionEvery,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: worker.Hooks{
			OnStart: func(context.Context) { close(running) },
			OnOutcome: func(_ context.Context, o worker.Outcome) {
				if o.Kind == worker.OutcomeCompleted {
					completed.Add(1)
				}
			},
			OnRetention: func(_ context.Context, r redisstore.RetentionResult) {
				passes.Add(1)
				dropped.Add(int64(r.Dropped))
				changed.Add(int64(r.Changed))
				skipped.Add(int64(r.Skipped))
			},
		},
	}, worker.Handle(a2Consumer, func(_ context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		now := clk.now()
		if i, ok := churnSession(head.Session); ok && i < n {
			if !started[i].CompareAndSwap(false, true) {
				reruns.Add(1)
			} else if d, ok := appended.since(i, now); ok {
				rec.add(d)
			}
		}
		return nil, nil
	}))
	if err != nil {
		return Measurement{}, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	select {
	case <-running:
	case err := <-done:
		return Measurement{}, fmt.Errorf("a2bench: the worker ended before it started: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the work subscriptions confirm
	var trace MemoryTrace
	if trace.Start, err = h.memoryPoint(ctx); err != nil {
		return Measurement{}, err
	}
	passes0, dropped0 := passes.Load(), dropped.Load()
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	target := []a2redis.Target{{Consumer: a2Consumer}}
	achieved, err := atRate(ctx, churnRate, n, func(ctx context.Context, i int) error {
		appended[i].Store(max(clk.now(), 1))
		_, err := st.Append(ctx, "churn-"+strconv.Itoa(i), []a2redis.Event{{Type: "order.placed", Payload: payload, Targets: target}}, redisstore.AppendOptions{})
		return err
	})
	if err != nil {
		return Measurement{}, err
	}
	if err := waitFor(ctx, 10*time.Second, "the churn's sessions handled", func() bool {
		return rec.count() >= n && completed.Load() >= int64(n)
	}); err != nil {
		return Measurement{}, err
	}
	handledIn := time.Since(start)
	if trace.Steady, err = h.memoryPoint(ctx); err != nil {
		return Measurement{}, err
	}
	if err := waitFor(ctx, churnDrain, "the retention's drops", func() bool { return dropped.Load()-dropped0 >= int64(n) }); err != nil {
		return Measurement{}, fmt.Errorf("%w (%d of %d sessions dropped)", err, dropped.Load()-dropped0, n)
	}
	elapsed := time.Since(start)
	cost, err := ph.end(ctx, n)
	if err != nil {
		return Measurement{}, err
	}
	if trace.End, err = h.memoryPoint(ctx); err != nil {
		return Measurement{}, err
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return Measurement{}, fmt.Errorf("a2bench: worker: %w", err)
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("a fresh session's append start → its event's handler start"),
		Cost:    cost,
		Memory:  &trace,
		Notes: map[string]float64{
			"sessions":                float64(n),
			"seconds_to_last_handled": handledIn.Seconds(),
			"seconds_to_last_dropped": elapsed.Seconds(),
			"retention_passes":        float64(passes.Load() - passes0),
			"sessions_dropped":        float64(dropped.Load() - dropped0),
			"retention_changed":       float64(changed.Load()),
			"retention_skipped":       float64(skipped.Load()),
			"handler_reruns":          float64(reruns.Load()),
		},
	}, nil
}
