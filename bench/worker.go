package bench

import (
	"context"
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

// The worker runtime's scenarios: the same workloads as the hand-written
// claim loops, run by package worker (claims from the ready index and its
// wake-ups, batched completions, complete-and-claim for lanes, renewal).
const workerConcurrency = 64

func workerScenarios(latencyEvents int) []*scenario {
	var list []*scenario
	for _, s := range []int{1, 1000} {
		list = append(list, &scenario{
			id: fmt.Sprintf("a2redis/worker/event-cursors/sessions=%d", s), system: SystemA2, kind: KindProcess,
			title:  fmt.Sprintf("worker runtime, Concurrency %d, an event consumer over %s", workerConcurrency, sessionsText(s)),
			events: 20_000, ceiling: "streams/group", asynq: "asynq/process/concurrency=64",
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return workerEventCursors(ctx, h, n, s)
			},
		})
	}
	for _, lanes := range []int{1, 16} {
		events, ref := 15_000, "asynq/process/concurrency=16"
		if lanes == 1 {
			events, ref = 4_000, "asynq/process/concurrency=1"
		}
		list = append(list, &scenario{
			id: fmt.Sprintf("a2redis/worker/ordered/lanes=%d", lanes), system: SystemA2, kind: KindProcess,
			title:  fmt.Sprintf("worker runtime, a lane consumer, %d strictly ordered lane(s) in 1 session", lanes),
			events: events, ceiling: "streams/group", asynq: ref,
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return workerOrdered(ctx, h, n, lanes)
			},
		})
	}
	list = append(list, &scenario{
		id: "a2redis/worker/typed-log/sessions=100", system: SystemA2, kind: KindProcess,
		title:  "worker runtime, a typed log consumer (1 of 2 appended events is its type) over 100 sessions",
		events: 10_000, ceiling: "streams/group", asynq: "asynq/process/concurrency=16",
		run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
			return workerTypedLog(ctx, h, n, 100)
		},
	}, &scenario{
		id: "a2redis/worker/latency", system: SystemA2, kind: KindLatency,
		title:  "Append → handler start in the worker runtime (woken by wake-ups), 1 session, fixed rate",
		events: latencyEvents, ceiling: "streams/latency", asynq: "asynq/latency",
		run: workerLatency,
	})
	return append(list, hotSessionScenarios()...)
}

// hotSpec is one hot-session row: the consumer kind, when the hot
// session's backlog arrives (none: the control), and how many workers run.
type hotSpec struct {
	kind    string // "event", "lane" or "log"
	arrival string // "" (no hot session), "running", "before" or "continuous"
	workers int
}

// hotSessionScenarios are the fair-share rows (issue 34): for each
// consumer kind a control without the hot session and the same with a hot
// backlog, plus the event consumer's backlog arriving before the worker
// starts, arriving continuously, and with three workers.
func hotSessionScenarios() []*scenario {
	specs := []struct {
		id, title string
		spec      hotSpec
	}{
		{"control", fmt.Sprintf("worker runtime, Concurrency 16, a 1 ms handler, an event consumer: %d sessions × %d events appended at once, "+
			"append → handler start of their events, with nothing else to do (the control of the next rows)", hotSmalls, hotSmallEvents),
			hotSpec{"event", "", 1}},
		{"backlog", fmt.Sprintf("the same, while the worker has a backlog of %d events (at scale 1) in one other session, appended while it runs "+
			"(fair share: within 2× of the control)", hotBacklog), hotSpec{"event", "running", 1}},
		{"backlog-before-start", "the same, the backlog appended before the worker starts", hotSpec{"event", "before", 1}},
		{"backlog-continuous", "the same, and the hot session appended to 100 events every 20 ms (5,000/s) until every small session's events started",
			hotSpec{"event", "continuous", 1}},
		{"backlog-3-workers", "the backlog row with three workers of Concurrency 16 (each receives every wake-up and rotates on its own)",
			hotSpec{"event", "running", 3}},
		{"lane/control", "the control row for a lane consumer (a small session's events on 5 lanes, the hot session's over 50)",
			hotSpec{"lane", "", 1}},
		{"lane/backlog", "the backlog row for the lane consumer", hotSpec{"lane", "running", 1}},
		{"log/control", "the control row for a typed log consumer (one log lane per session: a session's events run in order)",
			hotSpec{"log", "", 1}},
		{"log/backlog", "the backlog row for the typed log consumer", hotSpec{"log", "running", 1}},
	}
	list := make([]*scenario, 0, len(specs))
	for _, r := range specs {
		list = append(list, &scenario{
			id: "a2redis/worker/hot-session/" + r.id, system: SystemA2, kind: KindLatency,
			title: r.title, events: hotSmalls * hotSmallEvents,
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return workerHotSession(ctx, h, n, r.spec)
			},
		})
	}
	return list
}

// workerStore returns a store on a fresh prefix declaring consumers (none:
// the worker then runs with AllConsumers, claiming without naming any).
func (h *harness) workerStore(ctx context.Context, consumers []a2redis.Consumer) (*redisstore.Store, string, error) {
	prefix := h.name("w")
	st, err := redisstore.New(ctx, h.client, redisstore.Config{Prefix: prefix, Consumers: consumers})
	if err != nil {
		return nil, "", fmt.Errorf("a2bench: redisstore.New: %w", err)
	}
	return st, prefix, nil
}

// runWorker runs a worker with handler for consumer until n heads
// completed, then stops it (the stop is timed too: a worker's last
// completions are written as it stops).
func runWorker(ctx context.Context, st *redisstore.Store, consumer string, n int, handler worker.Handler) (int64, error) {
	return runWorkers(ctx, []*redisstore.Store{st}, consumer, n, handler)
}

// runWorkers runs a worker on each store (one process each, as far as the
// store's own state goes) until n heads completed among them, then stops
// them all.
func runWorkers(ctx context.Context, stores []*redisstore.Store, consumer string, n int, handler worker.Handler) (int64, error) {
	var completed atomic.Int64
	var workers []*worker.Worker
	for _, st := range stores {
		w, err := worker.New(st, worker.Config{
			Concurrency:  workerConcurrency,
			AllConsumers: len(st.Consumers()) == 0,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Hooks: worker.Hooks{OnOutcome: func(_ context.Context, o worker.Outcome) {
				if o.Kind == worker.OutcomeCompleted {
					completed.Add(1)
				}
			}},
		}, worker.Handle(consumer, handler))
		if err != nil {
			return 0, err
		}
		workers = append(workers, w)
	}
	done := make(chan error, len(workers))
	for _, w := range workers {
		go func() { done <- w.Run(ctx) }()
	}
	err := waitFor(ctx, 2*time.Minute, "the workers", func() bool { return completed.Load() >= int64(n) })
	for _, w := range workers {
		if serr := w.Shutdown(ctx); err == nil {
			err = serr
		}
	}
	for range workers {
		if rerr := <-done; err == nil {
			err = rerr
		}
	}
	return completed.Load(), err
}

func noop(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }

func workerEventCursors(ctx context.Context, h *harness, n, sessions int) (Measurement, error) {
	st, prefix, err := h.workerStore(ctx, nil)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	return h.a2Process(ctx, st, prefix, n, n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
		return names[i%sessions], a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer}}}
	}, func(ctx context.Context) (int64, int64, error) {
		handled, err := runWorker(ctx, st, a2Consumer, n, noop)
		return handled, 0, err
	})
}

func workerOrdered(ctx context.Context, h *harness, n, lanes int) (Measurement, error) {
	st, prefix, err := h.workerStore(ctx, nil)
	if err != nil {
		return Measurement{}, err
	}
	last := make([]atomic.Int64, lanes)
	var disorder atomic.Int64
	m, err := h.a2Process(ctx, st, prefix, n, n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
		return "session-0", a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer, Lane: strconv.Itoa(i % lanes)}}}
	}, func(ctx context.Context) (int64, int64, error) {
		handled, err := runWorker(ctx, st, a2Consumer, n, func(_ context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			lane, _ := strconv.Atoi(head.Lane)
			if prev := last[lane].Swap(head.Index); prev >= head.Index {
				disorder.Add(1)
			}
			return nil, nil
		})
		return handled, 0, err
	})
	if err == nil && disorder.Load() > 0 {
		err = fmt.Errorf("a2bench: %d lane heads ran out of order", disorder.Load())
	}
	return m, err
}

func workerTypedLog(ctx context.Context, h *harness, n, sessions int) (Measurement, error) {
	served := []a2redis.Consumer{{Name: "audit", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"order.placed"}, Backfill: true}}}
	st, prefix, err := h.workerStore(ctx, served)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	return h.a2Process(ctx, st, prefix, n, 2*n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
		typ := "order.placed"
		if i%2 == 1 {
			typ = "order.viewed"
		}
		return names[(i/2)%sessions], a2redis.Event{Type: typ, Payload: payload}
	}, func(ctx context.Context) (int64, int64, error) {
		var wrong atomic.Int64
		handled, err := runWorker(ctx, st, "audit", n, func(_ context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			if head.Type != "order.placed" {
				wrong.Add(1)
			}
			return nil, nil
		})
		if err == nil && wrong.Load() > 0 {
			err = fmt.Errorf("a2bench: the typed log consumer got %d events of another type", wrong.Load())
		}
		return handled, 0, err
	})
}

func workerLatency(ctx context.Context, h *harness, n int) (Measurement, error) {
	st, _, err := h.workerStore(ctx, nil)
	if err != nil {
		return Measurement{}, err
	}
	const session = "live"
	clk := newClock()
	sent := make(stamps, n)
	rec := newRecorder(n)
	var completed atomic.Int64
	running := make(chan struct{})
	w, err := worker.New(st, worker.Config{
		Concurrency:  16,
		AllConsumers: true,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: worker.Hooks{
			OnStart: func(context.Context) { close(running) },
			OnOutcome: func(_ context.Context, o worker.Outcome) {
				if o.Kind == worker.OutcomeCompleted {
					completed.Add(1)
				}
			},
		},
	}, worker.Handle(a2Consumer, func(_ context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		now := clk.now()
		if seq, ok := eventSeq(head.ID); ok {
			if d, ok := sent.since(seq, now); ok {
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
	<-running
	time.Sleep(200 * time.Millisecond) // the work subscriptions confirm
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	achieved, err := appendAtRate(ctx, h, st, session, n, sent, clk)
	if err != nil {
		return Measurement{}, err
	}
	// The phase ends once every event is also completed: its cost is end
	// to end.
	elapsed, cost, err := finishRated(ctx, ph, start, n, "worker completions", func() bool { return rec.count() >= n && completed.Load() >= int64(n) }, stop, done, "worker")
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("Append start → handler start in the worker"),
		Cost:    cost,
	}, nil
}

// The hot-session rows: small sessions beside one session with a backlog.
const (
	hotSmalls      = 200
	hotSmallEvents = 5
	hotBacklog     = 20_000
	// The continuous row's hot producer: hotContinuousBatch events every
	// hotContinuousEvery.
	hotContinuousBatch = 100
	hotContinuousEvery = 20 * time.Millisecond
)

// workerHotSession measures how long the events of hotSmalls sessions of
// hotSmallEvents events each wait (their append's start → their handler's
// start) in workers whose handler takes about a millisecond, beside one
// other session given a backlog as spec says (none: the control). n is the
// small sessions' events.
func workerHotSession(ctx context.Context, h *harness, n int, spec hotSpec) (Measurement, error) {
	consumer, lanes := a2Consumer, 0
	var declared []a2redis.Consumer
	switch spec.kind {
	case "lane":
		lanes = 50
	case "log":
		consumer = "audit"
		declared = []a2redis.Consumer{{Name: consumer, Log: &a2redis.LogSpec{Lane: "log", Types: []string{"order.placed"}, Backfill: true}}}
	}
	st, _, err := h.workerStore(ctx, declared)
	if err != nil {
		return Measurement{}, err
	}
	// event returns the j-th event of a session (the hot one's lanes: 50).
	event := func(j, spread int) a2redis.Event {
		switch spec.kind {
		case "lane":
			return a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: consumer, Lane: strconv.Itoa(j % spread)}}}
		case "log":
			return a2redis.Event{Type: "order.placed", Payload: payload}
		}
		return a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: consumer}}}
	}
	backlog := 0
	if spec.arrival != "" {
		backlog = h.scaled(hotBacklog, 2000)
	}
	appendHot := func(count int) error {
		for i := 0; i < count; i += 500 {
			batch := make([]a2redis.Event, min(500, count-i))
			for j := range batch {
				batch[j] = event(i+j, max(lanes, 1))
			}
			if _, err := st.Append(ctx, "hot", batch, redisstore.AppendOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	if spec.arrival == "before" {
		if err := appendHot(backlog); err != nil {
			return Measurement{}, err
		}
	}
	sessions := n / hotSmallEvents
	clk := newClock()
	appended := make(stamps, sessions)
	rec := newRecorder(n)
	// hotWhile counts the hot session's heads started after the first
	// small session's append and before the last small event started.
	var smallsBegun atomic.Bool
	var hotWhile atomic.Int64
	handler := func(_ context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		if i, ok := strings.CutPrefix(head.Session, "small-"); ok {
			if k, err := strconv.Atoi(i); err == nil {
				if d, ok := appended.since(k, clk.now()); ok {
					rec.add(d)
				}
			}
		} else if smallsBegun.Load() && rec.count() < n {
			hotWhile.Add(1)
		}
		time.Sleep(time.Millisecond)
		return nil, nil
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, spec.workers)
	for range spec.workers {
		running := make(chan struct{})
		w, err := worker.New(st, worker.Config{
			Concurrency:  16,
			AllConsumers: declared == nil,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Hooks:        worker.Hooks{OnStart: func(context.Context) { close(running) }},
		}, worker.Handle(consumer, handler))
		if err != nil {
			return Measurement{}, err
		}
		go func() { done <- w.Run(wctx) }()
		<-running
	}
	time.Sleep(200 * time.Millisecond) // the work subscriptions confirm
	switch spec.arrival {
	case "running":
		if err := appendHot(backlog); err != nil {
			return Measurement{}, err
		}
	case "continuous":
		// The hot session is appended to until the workers stop: 100
		// events every 20 ms (5,000 a second, more than its share drains
		// while the small sessions wait, so its backlog keeps growing).
		hot := make(chan error, 1)
		defer func() { stop(); <-hot }()
		go func() {
			tick := time.NewTicker(hotContinuousEvery)
			defer tick.Stop()
			for {
				select {
				case <-wctx.Done():
					hot <- nil
					return
				case <-tick.C:
				}
				if err := appendHot(hotContinuousBatch); err != nil && wctx.Err() == nil {
					hot <- err
					return
				}
			}
		}()
		if err := appendHot(backlog); err != nil {
			return Measurement{}, err
		}
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	for k := range sessions {
		batch := make([]a2redis.Event, hotSmallEvents)
		for j := range batch {
			batch[j] = event(j, hotSmallEvents)
		}
		appended[k].Store(clk.now())
		smallsBegun.Store(true)
		if _, err := st.Append(ctx, fmt.Sprint("small-", k), batch, redisstore.AppendOptions{}); err != nil {
			return Measurement{}, err
		}
	}
	achieved := float64(n) / time.Since(start).Seconds()
	// The workers stop once the small sessions' events all started.
	all := make(chan error, 1)
	go func() {
		var first error
		for range spec.workers {
			if err := <-done; err != nil && first == nil {
				first = err
			}
		}
		all <- first
	}()
	elapsed, cost, err := finishRated(ctx, ph, start, n, "the small sessions' events", func() bool { return rec.count() >= n }, stop, all, "worker")
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("a small session's append start → its events' handler start"),
		Cost:    cost,
		Notes:   map[string]float64{"hot_heads_while_small_waited": float64(hotWhile.Load())},
	}, nil
}
