package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// Parameters of the a2redis scenarios.
const (
	a2AppendInFlight = 64 // 1-event appends in flight
	a2BatchInFlight  = 16 // 100-event batches in flight
	a2BatchSize      = 100
	a2FillInFlight   = 64 // 1-event appends filling a backlog
	a2ClaimLimit     = 16 // heads one event-cursor claim takes
	a2Consumer       = "worker"
	a2LeaseTTL       = time.Minute
)

func a2Scenarios(latencyEvents int) []*scenario {
	var list []*scenario
	for _, s := range []int{1, 100} {
		list = append(list, &scenario{
			id: fmt.Sprintf("a2redis/append-1/sessions=%d", s), system: SystemA2, kind: KindAppend,
			title:  fmt.Sprintf("Append of 1 event, %d in flight, over %s", a2AppendInFlight, sessionsText(s)),
			events: 30_000, ceiling: "streams/xadd", asynq: "asynq/enqueue",
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return a2Append(ctx, h, n, 1, a2AppendInFlight, s)
			},
		})
	}
	for _, s := range []int{1, 100} {
		list = append(list, &scenario{
			id: fmt.Sprintf("a2redis/append-100/sessions=%d", s), system: SystemA2, kind: KindAppend,
			title:  fmt.Sprintf("Append of %d-event batches, %d in flight, over %s", a2BatchSize, a2BatchInFlight, sessionsText(s)),
			events: 200_000, ceiling: "streams/xadd", asynq: "asynq/enqueue",
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return a2Append(ctx, h, n, a2BatchSize, a2BatchInFlight, s)
			},
		})
	}
	for _, handlers := range []int{16, 64} {
		for _, s := range []int{1, 100} {
			list = append(list, &scenario{
				id: fmt.Sprintf("a2redis/event-cursors/handlers=%d/sessions=%d", handlers, s), system: SystemA2, kind: KindProcess,
				title:  fmt.Sprintf("Event cursors: %d handlers claim (limit %d) and complete, over %s", handlers, a2ClaimLimit, sessionsText(s)),
				events: 20_000, ceiling: "streams/group", asynq: fmt.Sprintf("asynq/process/concurrency=%d", handlers),
				run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
					return a2EventCursors(ctx, h, n, handlers, s)
				},
			})
		}
	}
	for _, lanes := range []int{1, 16} {
		for _, s := range []int{1, 100} {
			events := 15_000
			if lanes == 1 && s == 1 {
				events = 4_000 // strictly sequential: one head at a time
			}
			list = append(list, &scenario{
				id: fmt.Sprintf("a2redis/ordered/lanes=%d/sessions=%d", lanes, s), system: SystemA2, kind: KindProcess,
				title:  fmt.Sprintf("Lane cursors, %d lane(s) per session, one handler per lane, over %s", lanes, sessionsText(s)),
				events: events, ceiling: "streams/group", asynq: orderedReference(lanes),
				run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
					return a2Ordered(ctx, h, n, lanes, s)
				},
			})
		}
	}
	for _, s := range []int{1, 100} {
		events := 10_000
		if s == 1 {
			events = 4_000
		}
		list = append(list, &scenario{
			id: fmt.Sprintf("a2redis/typed-log/sessions=%d", s), system: SystemA2, kind: KindProcess,
			title:  fmt.Sprintf("Typed log consumer (1 of 2 appended events is its type), one handler per session, over %s", sessionsText(s)),
			events: events, ceiling: "streams/group", asynq: "asynq/process/concurrency=16",
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return a2TypedLog(ctx, h, n, s)
			},
		})
	}
	list = append(list,
		&scenario{
			id: "a2redis/latency/feed", system: SystemA2, kind: KindLatency,
			title:  "Append → notify.Feed delivery, 1 session, fixed rate",
			events: latencyEvents, ceiling: "streams/latency", asynq: "asynq/latency",
			run: a2LatencyFeed,
		},
		&scenario{
			id: "a2redis/latency/claim", system: SystemA2, kind: KindLatency,
			title:  "Append → claim by a handler woken by wake-ups (no polling), then complete, 1 session, fixed rate",
			events: latencyEvents, ceiling: "streams/latency", asynq: "asynq/latency",
			run: a2LatencyClaim,
		},
	)
	return list
}

func sessionsText(n int) string {
	if n == 1 {
		return "1 session"
	}
	return fmt.Sprintf("%d sessions", n)
}

func sessionNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "session-" + strconv.Itoa(i)
	}
	return out
}

// store returns a store on a fresh prefix of this run.
func (h *harness) store(ctx context.Context) (*redisstore.Store, string, error) {
	prefix := h.name("a2")
	st, err := redisstore.New(ctx, h.client, redisstore.Config{Prefix: prefix})
	if err != nil {
		return nil, "", fmt.Errorf("a2bench: redisstore.New: %w", err)
	}
	return st, prefix, nil
}

func a2Append(ctx context.Context, h *harness, n, batch, inFlight, sessions int) (Measurement, error) {
	st, prefix, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	calls := max(n/batch, 1)
	events := calls * batch
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	rec := newRecorder(calls)
	elapsed, err := parallel(ctx, inFlight, calls, rec, func(ctx context.Context, i int) error {
		list := make([]a2redis.Event, batch)
		for j := range list {
			list[j] = a2redis.Event{Type: "order.placed", Payload: payload}
		}
		_, err := st.Append(ctx, names[i%sessions], list, redisstore.AppendOptions{})
		return err
	})
	if err != nil {
		return Measurement{}, err
	}
	m, err := h.appended(ctx, ph, mem0, events, elapsed, rec, fmt.Sprintf("Append call (%d events), %d in flight", batch, inFlight))
	if err != nil {
		return Measurement{}, err
	}
	m.MemByKind, err = h.memoryByKind(ctx, prefix, events)
	return m, err
}

// a2Fill appends `appended` events one per call, a2FillInFlight in flight,
// and returns the fill's cost per handled event and used_memory before it.
func a2Fill(ctx context.Context, h *harness, st *redisstore.Store, appended, handled int, opts redisstore.AppendOptions, mk func(i int) (string, a2redis.Event)) (Cost, float64, error) {
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Cost{}, 0, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Cost{}, 0, err
	}
	if _, err := parallel(ctx, a2FillInFlight, appended, nil, func(ctx context.Context, i int) error {
		session, e := mk(i)
		_, err := st.Append(ctx, session, []a2redis.Event{e}, opts)
		return err
	}); err != nil {
		return Cost{}, 0, err
	}
	cost, err := ph.end(ctx, handled)
	return cost, mem0, err
}

// processed finishes a processing measurement: the processing phase's cost
// and the memory figures.
func (h *harness) processed(ctx context.Context, ph *phase, fill Cost, mem0, memFilled float64, n int, elapsed time.Duration) (Measurement, error) {
	return h.processedKeys(ctx, ph, fill, mem0, memFilled, n, elapsed, "")
}

// processedKeys is processed with a memory breakdown of the prefix's keys
// (none when prefix is empty).
func (h *harness) processedKeys(ctx context.Context, ph *phase, fill Cost, mem0, memFilled float64, n int, elapsed time.Duration, prefix string) (Measurement, error) {
	cost, err := ph.end(ctx, n)
	if err != nil {
		return Measurement{}, err
	}
	mem2, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	handled := (mem2 - mem0) / float64(n)
	m := Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: float64(n) / elapsed.Seconds(),
		Cost: cost, Fill: &fill, MemRetained: (memFilled - mem0) / float64(n), MemHandled: &handled,
	}
	if prefix != "" {
		if m.MemByKind, err = h.memoryByKind(ctx, prefix, n); err != nil {
			return Measurement{}, err
		}
	}
	return m, nil
}

// a2Process measures one processing scenario: it fills the backlog (appended
// events, n of them to handle), then times drain, which must handle all n,
// and reports the processing cost, memory and claims per event.
func (h *harness) a2Process(ctx context.Context, st *redisstore.Store, prefix string, n, appended int, opts redisstore.AppendOptions,
	mk func(i int) (string, a2redis.Event), drain func(ctx context.Context) (handled, claims int64, err error)) (Measurement, error) {
	fill, mem0, err := a2Fill(ctx, h, st, appended, n, opts, mk)
	if err != nil {
		return Measurement{}, err
	}
	memFilled, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	handled, claims, err := drain(ctx)
	elapsed := time.Since(start)
	if err != nil {
		return Measurement{}, err
	}
	if handled != int64(n) {
		return Measurement{}, fmt.Errorf("%w: %d of %d", errShort, handled, n)
	}
	m, err := h.processedKeys(ctx, ph, fill, mem0, memFilled, n, elapsed, prefix)
	if claims > 0 {
		m.Notes = map[string]float64{"claims_per_event": float64(claims) / float64(n)}
	}
	return m, err
}

func a2EventCursors(ctx context.Context, h *harness, n, handlers, sessions int) (Measurement, error) {
	st, prefix, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	return h.a2Process(ctx, st, prefix, n, n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
		return names[i%sessions], a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer}}}
	}, func(ctx context.Context) (int64, int64, error) {
		return drainEventCursors(ctx, st, names, handlers)
	})
}

// drainEventCursors handles every head of the sessions with `handlers`
// goroutines. Work is handed out as session tokens (each session gets
// enough tokens for every handler to work on it when there are fewer
// sessions than handlers): a handler takes a token, claims up to
// a2ClaimLimit heads of that session, completes them one by one and puts
// the token back; a claim that finds nothing free (settled, or every head
// held by other handlers) retires the token. The backlog is complete before
// draining starts, so a retired token never strands work.
func drainEventCursors(ctx context.Context, st *redisstore.Store, sessions []string, handlers int) (handled, claims int64, err error) {
	per := (handlers + len(sessions) - 1) / len(sessions)
	tokens := make(chan string, len(sessions)*per)
	for range per {
		for _, s := range sessions {
			tokens <- s
		}
	}
	var live atomic.Int64
	live.Store(int64(len(sessions) * per))
	var nHandled, nClaims atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range handlers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := "h" + strconv.Itoa(w)
			for session := range tokens {
				if ctx.Err() != nil {
					return
				}
				res, err := st.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: holder, TTL: a2LeaseTTL, Limit: a2ClaimLimit})
				nClaims.Add(1)
				if err != nil {
					cancel(err)
					return
				}
				if res.Outcome != redisstore.Claimed || len(res.Heads) == 0 {
					if live.Add(-1) == 0 {
						close(tokens)
					}
					continue
				}
				if err := completeAll(ctx, st, session, res.Heads); err != nil {
					cancel(err)
					return
				}
				nHandled.Add(int64(len(res.Heads)))
				tokens <- session
			}
		}()
	}
	wg.Wait()
	return nHandled.Load(), nClaims.Load(), context.Cause(ctx)
}

func a2Ordered(ctx context.Context, h *harness, n, lanes, sessions int) (Measurement, error) {
	st, prefix, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	return h.a2Process(ctx, st, prefix, n, n, redisstore.AppendOptions{}, func(i int) (string, a2redis.Event) {
		lane := strconv.Itoa((i / sessions) % lanes)
		return names[i%sessions], a2redis.Event{Type: "order.placed", Payload: payload, Targets: []a2redis.Target{{Consumer: a2Consumer, Lane: lane}}}
	}, func(ctx context.Context) (int64, int64, error) {
		return drainLanes(ctx, st, names, lanes)
	})
}

// orderedReference is the asynq run an ordered scenario is compared with:
// Concurrency 1 (asynq's only way to keep order) for a single lane.
func orderedReference(lanes int) string {
	if lanes == 1 {
		return "asynq/process/concurrency=1"
	}
	return "asynq/process/concurrency=16"
}

// drainLanes handles every lane head of the sessions: one worker per
// session claims every runnable lane head in one call (limit = lanes),
// then completes them together with CompleteAndClaim, which claims each
// lane's next head in the same script call, and goes on with those. Only a
// lane's head is ever runnable, so at most one event per lane is in hand
// at a time: the order guarantee, with one handler per lane.
func drainLanes(ctx context.Context, st *redisstore.Store, sessions []string, lanes int) (handled, claims int64, err error) {
	var nHandled, nClaims atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, session := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := st.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w-" + session, TTL: a2LeaseTTL, Limit: lanes})
				nClaims.Add(1)
				if err != nil {
					cancel(err)
					return
				}
				if res.Outcome != redisstore.Claimed || len(res.Heads) == 0 {
					return
				}
				// One head per lane; the handlers return nothing, so the
				// heads complete together, and the lanes' next heads come
				// back claimed.
				heads := res.Heads
				for len(heads) > 0 && ctx.Err() == nil {
					done := make([]redisstore.Attempt, len(heads))
					for i, h := range heads {
						done[i] = redisstore.AttemptOf(h)
					}
					r, err := st.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done}, redisstore.NextClaim{Holder: "w-" + session, TTL: a2LeaseTTL})
					if err != nil {
						cancel(err)
						return
					}
					for _, one := range r.Results {
						if one.Outcome != redisstore.Completed {
							cancel(fmt.Errorf("completion %v", one.Outcome))
							return
						}
					}
					nHandled.Add(int64(len(heads)))
					heads = r.Next.Heads
				}
			}
		}()
	}
	wg.Wait()
	return nHandled.Load(), nClaims.Load(), context.Cause(ctx)
}

func a2TypedLog(ctx context.Context, h *harness, n, sessions int) (Measurement, error) {
	st, prefix, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	names := sessionNames(sessions)
	served := []a2redis.Consumer{{Name: "audit", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"order.placed"}, Backfill: true}}}
	// 2n events: order.placed and order.viewed by turns, in pairs per session.
	return h.a2Process(ctx, st, prefix, n, 2*n, redisstore.AppendOptions{Consumers: served}, func(i int) (string, a2redis.Event) {
		typ := "order.placed"
		if i%2 == 1 {
			typ = "order.viewed"
		}
		return names[(i/2)%sessions], a2redis.Event{Type: typ, Payload: payload}
	}, func(ctx context.Context) (int64, int64, error) {
		return drainTypedLog(ctx, st, names, served)
	})
}

// drainTypedLog runs one typed log consumer per session: it claims the
// session's head (only events of its type ever are), then completes each
// head with CompleteAndClaim, which claims the log cursor's next head in
// the same script call, until the log has none.
func drainTypedLog(ctx context.Context, st *redisstore.Store, sessions []string, served []a2redis.Consumer) (handled, claims int64, err error) {
	var nHandled, nClaims atomic.Int64
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, session := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				res, err := st.ClaimAvailable(wctx, redisstore.ClaimRequest{Session: session, Holder: "w-" + session, TTL: a2LeaseTTL, Consumers: served})
				if err != nil {
					cancel(err)
					return
				}
				nClaims.Add(1)
				if res.Outcome != redisstore.Claimed || len(res.Heads) == 0 {
					return
				}
				heads := res.Heads
				for len(heads) > 0 && wctx.Err() == nil {
					head := heads[0]
					if len(heads) != 1 || head.Type != "order.placed" {
						cancel(fmt.Errorf("a2bench: typed log consumer got %d heads, the first a %q event", len(heads), head.Type))
						return
					}
					r, err := st.CompleteAndClaim(wctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}, Consumers: served},
						redisstore.NextClaim{Holder: "w-" + session, TTL: a2LeaseTTL})
					if err != nil {
						cancel(err)
						return
					}
					if r.Results[0].Outcome != redisstore.Completed {
						cancel(fmt.Errorf("completion %v", r.Results[0].Outcome))
						return
					}
					nHandled.Add(1)
					heads = r.Next.Heads
				}
			}
		}()
	}
	wg.Wait()
	return nHandled.Load(), nClaims.Load(), context.Cause(wctx)
}

// eventSeq parses the sequence number of a latency event's id ("e<seq>").
func eventSeq(id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, "e")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

func a2LatencyFeed(ctx context.Context, h *harness, n int) (Measurement, error) {
	st, _, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	const session = "live"
	clk := newClock()
	sent := make(stamps, n)
	rec := newRecorder(n)
	var caughtUp, carried atomic.Int64
	ready := make(chan struct{})
	var readyOnce sync.Once
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	feed := notify.NewFeed(st, notify.FeedOptions{})
	followed := make(chan error, 1)
	go func() {
		followed <- feed.Follow(fctx, session, 0, func(u notify.Update) error {
			now := clk.now()
			if u.CaughtUp {
				caughtUp.Add(int64(len(u.Events)))
			} else {
				carried.Add(int64(len(u.Events)))
			}
			for _, e := range u.Events {
				if e.ID == "ready" {
					readyOnce.Do(func() { close(ready) })
					continue
				}
				if seq, ok := eventSeq(e.ID); ok {
					if d, ok := sent.since(seq, now); ok {
						rec.add(d)
					}
				}
			}
			return nil
		})
	}()
	// Follow subscribes, then catches up: the ready event arrives either way.
	if _, err := st.Append(ctx, session, []a2redis.Event{{ID: "ready", Type: "ready"}}, redisstore.AppendOptions{}); err != nil {
		return Measurement{}, err
	}
	select {
	case <-ready:
	case err := <-followed:
		return Measurement{}, fmt.Errorf("a2bench: Follow ended before the feed was ready: %v", err)
	case <-time.After(10 * time.Second):
		return Measurement{}, errors.New("a2bench: the feed did not deliver its first event within 10s")
	}
	caughtUp.Store(0)
	carried.Store(0)
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	achieved, err := atRate(ctx, h.opts.Rate, n, func(ctx context.Context, i int) error {
		sent[i].Store(max(clk.now(), 1))
		_, err := st.Append(ctx, session, []a2redis.Event{{ID: "e" + strconv.Itoa(i), Type: "order.placed", Payload: payload}}, redisstore.AppendOptions{})
		return err
	})
	if err != nil {
		return Measurement{}, err
	}
	elapsed, cost, err := finishRated(ctx, ph, start, n, "feed deliveries", func() bool { return rec.count() >= n }, stop, followed, "Follow")
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("Append start → Feed delivery"),
		Cost:    cost,
		Notes:   map[string]float64{"events_carried_by_wakeups": float64(carried.Load()), "events_caught_up_by_xrange": float64(caughtUp.Load())},
	}, nil
}

func a2LatencyClaim(ctx context.Context, h *harness, n int) (Measurement, error) {
	st, _, err := h.store(ctx)
	if err != nil {
		return Measurement{}, err
	}
	const session = "live"
	clk := newClock()
	sent := make(stamps, n)
	rec := newRecorder(n)
	wake := make(chan struct{}, 1)
	ready := make(chan struct{})
	var readyOnce sync.Once
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	// A session watcher, not a bare subscriber: appends publish a session's
	// wake-ups only while a watch (or feed) marks it followed.
	sub := notify.NewSessionWatcher(st, notify.WatchOptions{})
	subscribed := make(chan error, 1)
	go func() {
		subscribed <- sub.Watch(sctx, session, func(n notify.Notice) error {
			if n.Kind == notify.NoticeSubscribed {
				readyOnce.Do(func() { close(ready) })
			}
			select {
			case wake <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-subscribed:
		return Measurement{}, fmt.Errorf("a2bench: Subscribe ended before it was subscribed: %v", err)
	case <-time.After(10 * time.Second):
		return Measurement{}, errors.New("a2bench: no subscription within 10s")
	}
	// The handler claims only when woken (the subscription's confirmation
	// wakes it once), or again at once after a full page. A wake-up that
	// arrives while it works stays in the channel, so none is lost.
	var claims, emptyClaims, fallbacks, completed atomic.Int64
	handlerDone := make(chan error, 1)
	go func() {
		handlerDone <- func() error {
			full := false
			for {
				if !full {
					t := time.NewTimer(time.Second)
					select {
					case <-wake:
					case <-t.C:
						fallbacks.Add(1)
					case <-sctx.Done():
						t.Stop()
						return nil
					}
					t.Stop()
				}
				res, err := st.ClaimAvailable(sctx, redisstore.ClaimRequest{Session: session, Holder: "handler", TTL: a2LeaseTTL, Limit: a2ClaimLimit})
				if err != nil {
					return err
				}
				claims.Add(1)
				full = len(res.Heads)+len(res.DeadLettered) >= a2ClaimLimit
				if len(res.Heads) == 0 {
					emptyClaims.Add(1)
					continue
				}
				now := clk.now()
				for _, head := range res.Heads {
					if seq, ok := eventSeq(head.ID); ok {
						if d, ok := sent.since(seq, now); ok {
							rec.add(d)
						}
					}
					if _, err := st.CompleteAttempt(sctx, redisstore.CompleteRequest{Session: session, Head: head.Ref(), Attempt: head.Attempts}); err != nil {
						return err
					}
					completed.Add(1)
				}
			}
		}()
	}()
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	achieved, err := appendAtRate(ctx, h, st, session, n, sent, clk)
	if err != nil {
		return Measurement{}, err
	}
	elapsed, cost, err := finishRated(ctx, ph, start, n, "claims and completions", func() bool { return completed.Load() >= int64(n) }, stop, handlerDone, "handler")
	if err != nil {
		return Measurement{}, err
	}
	<-subscribed
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("Append start → head in a woken handler's hand"),
		Cost:    cost,
		Notes: map[string]float64{
			"claims_per_event":       float64(claims.Load()) / float64(n),
			"empty_claims_per_event": float64(emptyClaims.Load()) / float64(n),
			"fallback_wakeups":       float64(fallbacks.Load()),
		},
	}, nil
}

// completeAll completes the heads of one claim in one call (CompleteAttempts),
// as a worker whose handlers return no events does.
func completeAll(ctx context.Context, st *redisstore.Store, session string, heads []a2redis.HeadEvent) error {
	done := make([]redisstore.Attempt, len(heads))
	for i, h := range heads {
		done[i] = redisstore.AttemptOf(h)
	}
	_, err := st.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done})
	return err
}
