// Package workertest runs a handler through the real worker runtime against
// an embedded store, so that a handler's author can assert, in a few lines,
// what the runtime makes of it: the outcome (completed, failed and held for
// a retry, snoozed, dead-lettered), the events it returned as stored, the
// retry delay, the failures counted.
//
//	h := workertest.New(t, "mailer", sendMail)
//	res := h.Work(ctx, a2redis.Event{Type: "order.placed", Payload: order})
//	if res.Outcome().Kind != worker.OutcomeCompleted { ... }
//
// A Harness owns a store on an embedded miniredis (WithClient runs it on a
// real server instead) whose clock is a test clock: a failed or snoozed head
// is held for its delay on that clock, and Resume moves the clock past the
// hold and runs the head again at once, so retries are tested without
// waiting. Each Work or Resume starts a worker (worker.New with the
// consumer's handler and the Config given with WithConfig), lets it run
// until every head of the round has an outcome, and shuts it down: what a
// round reports is what a deployed worker would have recorded.
package workertest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// DefaultRoundTimeout bounds one Work or Resume when its ctx has no
// deadline: a round that has not seen every outcome by then fails the test.
const DefaultRoundTimeout = 10 * time.Second

// DefaultSession is the session a Harness appends to unless WithSession
// names another.
const DefaultSession = "workertest"

// TB is what the harness needs of a test: *testing.T and *testing.B are
// TBs (testing.TB is one), and so is any type with these methods, such as
// the small one a runnable example defines.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// prefixSeq tells apart the prefixes of harnesses on one real server.
var prefixSeq atomic.Int64

// Option configures a Harness.
type Option func(*options)

type options struct {
	client    rueidis.Client
	consumer  *a2redis.Consumer
	lane      string
	session   string
	cfg       worker.Config
	handlerOp []worker.HandlerOption
	start     time.Time
}

// WithClient runs the harness's store on client (a real server) instead of
// an embedded miniredis. Each Harness uses its own key prefix there.
func WithClient(client rueidis.Client) Option { return func(o *options) { o.client = client } }

// WithLane makes the consumer a lane consumer: the events Work appends
// without targets join lane of the consumer (one head at a time, in
// order). Default: an event consumer (an event cursor per event).
func WithLane(lane string) Option { return func(o *options) { o.lane = lane } }

// WithLog makes the consumer a typed log consumer reading spec (declared
// on the harness's store, as a deployment declares it).
func WithLog(spec a2redis.LogSpec) Option {
	return func(o *options) { o.consumer = &a2redis.Consumer{Log: &spec} }
}

// WithSession names the session the harness appends to (default
// DefaultSession).
func WithSession(session string) Option { return func(o *options) { o.session = session } }

// WithConfig is the worker.Config of every round's worker (MaxFailures,
// Backoff, Middleware, Hooks, …). The harness sets ID, Logger (when nil:
// nothing is logged) and RepairEvery (off), and chains its own OnOutcome
// hook after cfg's.
func WithConfig(cfg worker.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithHandlerOptions are the consumer's worker.HandlerOption (WithBackoff,
// WithTimeout, WithMiddleware, …).
func WithHandlerOptions(opts ...worker.HandlerOption) Option {
	return func(o *options) { o.handlerOp = append(o.handlerOp, opts...) }
}

// WithStart sets the test clock's first instant (default 2030-01-01 UTC).
func WithStart(at time.Time) Option { return func(o *options) { o.start = at } }

// Harness runs one consumer's handler through the worker runtime against
// its own store. It is not safe for concurrent use.
type Harness struct {
	t        TB
	consumer string
	handler  worker.Handler
	opts     options
	store    *redisstore.Store
	clock    *clock
	rounds   int
	// open are the heads not settled yet (never run, or held for a retry
	// or a snooze), by head; order keeps them in append order.
	open  map[a2redis.HeadRef]*worker.Outcome
	order []a2redis.HeadRef
	// ordered: the consumer's heads run one at a time (a lane or a log).
	ordered bool
}

// New returns a harness that runs handler for consumer. It fails t when the
// store cannot be set up; everything it starts ends with the test.
func New(t TB, consumer string, handler worker.Handler, opts ...Option) *Harness {
	t.Helper()
	o := options{session: DefaultSession, start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Harness{t: t, consumer: consumer, handler: handler, opts: o,
		clock: &clock{now: o.start}, open: map[a2redis.HeadRef]*worker.Outcome{},
		ordered: o.lane != "" || o.consumer != nil}
	client := o.client
	prefix := "a2wt"
	if client == nil {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			t.Fatalf("workertest: starting miniredis: %v", err)
		}
		t.Cleanup(mr.Close)
		c, err := redisstore.Dial(context.Background(), "redis://"+mr.Addr())
		if err != nil {
			t.Fatalf("workertest: connecting to miniredis: %v", err)
		}
		t.Cleanup(c.Close)
		client = c
	} else {
		prefix = fmt.Sprintf("a2wt-%d-%d", time.Now().UnixNano(), prefixSeq.Add(1))
	}
	cfg := redisstore.Config{Prefix: prefix, Clock: h.clock.Now}
	if o.consumer != nil {
		c := *o.consumer
		c.Name = consumer
		cfg.Consumers = []a2redis.Consumer{c}
	}
	store, err := redisstore.New(context.Background(), client, cfg)
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	h.store = store
	return h
}

// Store is the harness's store, for assertions the Result does not cover
// (the log, the cursors, the dead letters).
func (h *Harness) Store() *redisstore.Store { return h.store }

// Session is the session the harness appends to.
func (h *Harness) Session() string { return h.opts.session }

// Now is the test clock's time.
func (h *Harness) Now() time.Time { return h.clock.Now() }

// Advance moves the test clock forward by d.
func (h *Harness) Advance(d time.Duration) { h.clock.advance(d) }

// Result is what one round recorded.
type Result struct {
	t TB
	// Outcomes are the outcomes the round's worker recorded, in the order
	// it recorded them (a lane's in lane order).
	Outcomes []worker.Outcome
}

// Outcome returns the round's single outcome; it fails the test when the
// round recorded none or more than one.
func (r *Result) Outcome() worker.Outcome {
	r.t.Helper()
	if len(r.Outcomes) != 1 {
		r.t.Fatalf("workertest: the round recorded %d outcomes, not 1: %v", len(r.Outcomes), r.Kinds())
		return worker.Outcome{}
	}
	return r.Outcomes[0]
}

// Kinds lists the outcomes' kinds, in order.
func (r *Result) Kinds() []worker.OutcomeKind {
	kinds := make([]worker.OutcomeKind, len(r.Outcomes))
	for i, o := range r.Outcomes {
		kinds[i] = o.Kind
	}
	return kinds
}

// Events are the events the round's handlers returned, as stored (their
// Cause set), in outcome order.
func (r *Result) Events() []a2redis.StoredEvent {
	var events []a2redis.StoredEvent
	for _, o := range r.Outcomes {
		events = append(events, o.Events...)
	}
	return events
}

// Work appends events to the harness's session and runs the handler on the
// heads they give the consumer, returning each head's outcome. An event
// without targets targets the consumer (its lane under WithLane); a typed
// log consumer takes the events of its types whatever their targets. A
// round ends when every head has an outcome, except that behind a lane or
// log head that did not complete, the later heads wait (strict order): they
// run in a later Resume. ctx bounds the round (DefaultRoundTimeout without
// a deadline).
func (h *Harness) Work(ctx context.Context, events ...a2redis.Event) *Result {
	h.t.Helper()
	if len(events) == 0 {
		h.t.Fatalf("workertest: Work needs at least one event")
	}
	batch := make([]a2redis.Event, len(events))
	for i, ev := range events {
		if len(ev.Targets) == 0 && h.opts.consumer == nil {
			ev.Targets = []a2redis.Target{{Consumer: h.consumer, Lane: h.opts.lane}}
		}
		batch[i] = ev
	}
	res, err := h.store.Append(ctx, h.opts.session, batch, redisstore.AppendOptions{})
	if err != nil {
		h.t.Fatalf("workertest: append: %v", err)
	}
	for i, stored := range res.Events {
		if ref, ok := h.headOf(batch[i], stored); ok {
			if _, seen := h.open[ref]; !seen {
				h.open[ref] = nil
				h.order = append(h.order, ref)
			}
		}
	}
	return h.round(ctx)
}

// Resume moves the test clock past the hold of every head a round left
// failed or snoozed (their RetryAfter) and runs them again, with the heads
// waiting behind them in a lane, returning the new outcomes. It fails the
// test when no head is open.
func (h *Harness) Resume(ctx context.Context) *Result {
	h.t.Helper()
	if len(h.order) == 0 {
		h.t.Fatalf("workertest: Resume with no head left to run")
	}
	var wait time.Duration
	for _, ref := range h.order {
		if o := h.open[ref]; o != nil && o.RetryAfter > wait {
			wait = o.RetryAfter
		}
	}
	h.clock.advance(wait + time.Millisecond)
	return h.round(ctx)
}

// Settle calls Resume until no head is open (each completed or
// dead-lettered) or max rounds ran, and returns every outcome of those
// rounds in order. It fails the test when heads are still open after max
// rounds.
func (h *Harness) Settle(ctx context.Context, max int) *Result {
	h.t.Helper()
	all := &Result{t: h.t}
	for i := 0; i < max && len(h.order) > 0; i++ {
		all.Outcomes = append(all.Outcomes, h.Resume(ctx).Outcomes...)
	}
	if len(h.order) > 0 {
		h.t.Fatalf("workertest: %d heads still open after %d rounds", len(h.order), max)
	}
	return all
}

// Open lists the heads not settled yet (never run, or held for a retry or
// a snooze), in append order.
func (h *Harness) Open() []a2redis.HeadRef { return slices.Clone(h.order) }

// headOf names the head that stored gives the harness's consumer, if any.
func (h *Harness) headOf(ev a2redis.Event, stored a2redis.StoredEvent) (a2redis.HeadRef, bool) {
	if c := h.opts.consumer; c != nil {
		log := c.Log
		if len(log.Types) == 0 || slices.Contains(log.Types, ev.Type) {
			return a2redis.HeadRef{Consumer: h.consumer, Lane: log.Lane, Index: stored.Index}, true
		}
		return a2redis.HeadRef{}, false
	}
	for _, tg := range ev.Targets {
		if tg.Consumer == h.consumer {
			return a2redis.HeadRef{Consumer: h.consumer, Lane: tg.Lane, Index: stored.Index}, true
		}
	}
	return a2redis.HeadRef{}, false
}

// expected returns how many outcomes this round waits for: every open head,
// but in a lane only up to the first head that will not complete can be
// known ahead, so ordered rounds end at the first outcome that is not
// Completed (see done).
func (h *Harness) done(got []worker.Outcome) bool {
	settled := map[a2redis.HeadRef]bool{}
	for _, o := range got {
		ref := o.Head.Ref()
		if h.ordered && o.Kind != worker.OutcomeCompleted {
			return true // the lane waits behind it
		}
		settled[ref] = true
	}
	for _, ref := range h.order {
		if !settled[ref] {
			return false
		}
	}
	return true
}

// round runs a worker until the open heads have their outcomes (see done),
// then shuts it down, and updates the open heads.
func (h *Harness) round(ctx context.Context) *Result {
	h.t.Helper()
	h.rounds++
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRoundTimeout)
		defer cancel()
	}
	var (
		mu   sync.Mutex
		got  []worker.Outcome
		full = make(chan struct{})
		once sync.Once
	)
	cfg := h.opts.cfg
	cfg.ID = fmt.Sprintf("workertest-%d", h.rounds)
	cfg.RepairEvery = -1
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	user := cfg.Hooks.OnOutcome
	cfg.Hooks.OnOutcome = func(octx context.Context, o worker.Outcome) {
		if user != nil {
			user(octx, o)
		}
		if o.Head.Session != h.opts.session {
			return
		}
		mu.Lock()
		got = append(got, o)
		if h.done(got) {
			once.Do(func() { close(full) })
		}
		mu.Unlock()
	}
	w, err := worker.New(h.store, cfg, worker.Handle(h.consumer, h.handler, h.opts.handlerOp...))
	if err != nil {
		h.t.Fatalf("workertest: %v", err)
	}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	var timedOut bool
	select {
	case <-full:
	case <-ctx.Done():
		timedOut = true
	}
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), DefaultRoundTimeout)
	defer cancelStop()
	if err := w.Shutdown(stopCtx); err != nil {
		h.t.Fatalf("workertest: worker shutdown: %v", err)
	}
	if err := <-ran; err != nil {
		h.t.Fatalf("workertest: worker: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if timedOut {
		h.t.Fatalf("workertest: the round ended (%v) with %d outcomes %v; open heads %v", context.Cause(ctx), len(got), (&Result{Outcomes: got}).Kinds(), h.order)
	}
	res := &Result{t: h.t, Outcomes: slices.Clone(got)}
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		ref := o.Head.Ref()
		switch o.Kind {
		case worker.OutcomeCompleted, worker.OutcomeDeadLettered:
			delete(h.open, ref)
			h.order = slices.DeleteFunc(h.order, func(r a2redis.HeadRef) bool { return r == ref })
		default:
			h.open[ref] = o
		}
	}
	return res
}

// clock is the harness's test clock: the store's Config.Clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// quietLogger drops the worker's log: a round's outcomes are in its Result.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
