package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

// Worker runs handlers for consumers of one store: it finds work through
// the ready index and its wake-ups, claims heads for its free slots, runs
// them, renews their leases and records their outcomes. Build it with New,
// run it with Run; it is safe for concurrent use.
//
// Its parts, each in a file of its own: the lifecycle (lifecycle.go:
// start, graceful stop, Shutdown) starts the dispatcher (dispatcher.go:
// wake-ups, the ready index, ClaimNext), whose claims enter this file's
// ledger (the held heads, the free slots, each consumer's MaxInFlight),
// which hands each head to the executor (executor.go: run one handler,
// map its result to a completion, a retry, a snooze, a release or a dead
// letter); heads that returned nothing go to the completer (completer.go:
// batched completions per session, and the lane heads their completion
// claims, which enter the ledger in turn). Renewal (renew.go) keeps the
// leases; reporting (reporting.go) logs, calls the hooks and heartbeats;
// replication.go decides what a claim or a completion reported not
// replicated still hands over.
type Worker struct {
	store     *redisstore.Store
	cfg       Config
	log       *slog.Logger
	consumers map[string]*consumer
	order     []*consumer
	// served is what claims and batched completions name as their
	// Consumers: the handled ones, or nil for an AllConsumers worker on a
	// prefix with no registered consumers.
	served  []a2redis.Consumer
	limited bool // some consumer has MaxInFlight
	// rated are the rate-limited consumers, claimed apart (claimRated).
	rated []*consumer
	// schedules runs Config.Schedules (nil: none).
	schedules *schedule.Runner

	renewGate atomic.Pointer[func()]      // tests: called before each renewal round
	beatGate  atomic.Pointer[func() bool] // tests: called before each heartbeat; false skips it
	// othersDue: the index listed other sessions due at the dispatcher's
	// last read, or has news it has not read (othersWaiting).
	othersDue atomic.Bool
	// parked: the dispatcher waits for a wake-up or MaxWait with nothing
	// left to read (tests wait for it before counting what an idle
	// worker sends).
	parked atomic.Bool
	// beats and repairs count the heartbeats and repair passes tried
	// (tests wait for the first of each before counting commands).
	beats, repairs atomic.Int64
	startedAt      time.Time // when Run started

	life    lifecycle // Run's and Shutdown's signals
	inbox   inbox     // the dispatcher's wake-ups, behind their own lock
	batches batches   // the completer's per-session batches, behind their own lock

	// Set by Run before any goroutine starts.
	hctx    context.Context // handlers' parent: cancelled when Run returns
	hcancel context.CancelCauseFunc
	wctx    context.Context // store calls: cancelled when Run returns
	wcancel context.CancelFunc

	// The ledger: what this process holds. Lock order: mu, then
	// batches.mu; inbox.mu is taken alone.
	mu            sync.Mutex
	started       bool
	stopping      bool
	free          int
	held          map[headKey]*job
	active        map[string]int // per session: its queued and running jobs
	busy          int            // releases in flight outside any job
	drained       chan struct{}
	drainedClosed bool
	kick          chan struct{} // a slot freed
}

// consumer is one handled consumer.
type consumer struct {
	spec    a2redis.Consumer
	handler Handler
	limit   int
	rate    *rateState // nil: no rate limit
	backoff Backoff
	timeout time.Duration
	running int    // jobs running (or waiting for an earlier attempt)
	queue   []*job // jobs claimed beyond limit
}

type headKey struct {
	session, consumer, lane string
	index                   int64
}

type jobState int

const (
	jobQueued   jobState = iota // claimed, waiting for its consumer's limit
	jobRunning                  // its handler runs (or waits for an earlier attempt)
	jobSettling                 // its handler returned; its outcome is being recorded
)

// job is one claimed head in this process.
type job struct {
	key     headKey
	session string
	head    a2redis.HeadEvent
	c       *consumer
	ctx     context.Context
	cancel  context.CancelCauseFunc
	state   jobState
	// leaseUntil is when the lease ends by this process's clock (from
	// just before the claim or renewal was sent).
	leaseUntil time.Time
	lost       bool // the claim was lost: record nothing
	stopped    bool // cancelled by a stop: release unless it succeeded
	keepSlot   bool // its slot passes to the lane's next head
	// turn counts the heads chained (each claimed with its predecessor's
	// completion) since the claim that started the session's turn: every
	// head of that claim and the lane heads that followed them share it.
	turn *turn
	prev *job // an earlier attempt of the same head, still running here
	done chan struct{}
}

// New returns a worker for store's consumers with the given handlers (at
// least one, each consumer once). When the store declares consumers
// (redisstore.Config.Consumers), every handled consumer must be declared;
// the worker then claims only the consumers it handles, so several
// processes can split a deployment's consumers between them.
func New(store *redisstore.Store, cfg Config, handlers ...HandlerSpec) (*Worker, error) {
	if store == nil {
		return nil, check.Invalid("store", "is nil")
	}
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	if len(handlers) == 0 {
		return nil, check.Invalid("handlers", "are missing: pass at least one worker.Handle(consumer, handler)")
	}
	declared := store.Consumers()
	byName := make(map[string]a2redis.Consumer, len(declared))
	for _, c := range declared {
		byName[c.Name] = c
	}
	w := &Worker{
		store: store, cfg: cfg, log: cfg.Logger, consumers: map[string]*consumer{},
		life: newLifecycle(), inbox: newInbox(), batches: batches{sessions: map[string]*sessionState{}},
		free: cfg.Concurrency, held: map[headKey]*job{}, active: map[string]int{}, drained: make(chan struct{}), kick: make(chan struct{}, 1),
	}
	for i, h := range handlers {
		field := fmt.Sprintf("handlers[%d]", i)
		if err := check.Name(field+" consumer", h.consumer); err != nil {
			return nil, err
		}
		if h.handler == nil {
			return nil, check.Invalid(field, "has a nil handler for consumer %q", h.consumer)
		}
		if _, dup := w.consumers[h.consumer]; dup {
			return nil, check.Invalid(field, "names consumer %q, which has a handler already", h.consumer)
		}
		if h.limit < 0 {
			return nil, check.Invalid(field, "MaxInFlight is negative (%d)", h.limit)
		}
		if h.timeout < 0 {
			return nil, check.Invalid(field, "WithTimeout is negative (%v)", h.timeout)
		}
		spec := a2redis.Consumer{Name: h.consumer}
		if len(declared) > 0 {
			d, ok := byName[h.consumer]
			if !ok {
				return nil, check.Invalid(field, "names consumer %q, which the prefix's consumer registry does not hold (Config.Consumers, Store.AddConsumers)", h.consumer)
			}
			spec = d
		}
		c := &consumer{spec: spec, limit: h.limit, backoff: h.backoff, timeout: h.timeout, handler: wrap(h, cfg.Middleware)}
		if h.rate != (redisstore.RateLimit{}) {
			if h.rate.Starts < 1 || h.rate.Per < time.Millisecond {
				return nil, check.Invalid(field, "RateLimit(%d, %v): at least 1 start per at least 1ms", h.rate.Starts, h.rate.Per)
			}
			c.rate = &rateState{limit: h.rate}
			w.rated = append(w.rated, c)
		}
		if c.backoff == nil {
			c.backoff = cfg.Backoff
		}
		w.limited = w.limited || c.limit > 0 || c.rate != nil
		w.consumers[h.consumer] = c
		w.order = append(w.order, c)
	}
	if len(cfg.Schedules) > 0 {
		r, err := schedule.NewRunner(store, schedule.Config{ID: cfg.ID, Logger: cfg.Logger}, cfg.Schedules...)
		if err != nil {
			return nil, fmt.Errorf("Config.Schedules: %w", err)
		}
		w.schedules = r
	}
	// With a registry, claims always name the handled consumers: one
	// registered later must not reach a worker that has no handler for it.
	if len(declared) > 0 || !cfg.AllConsumers {
		w.served = make([]a2redis.Consumer, len(w.order))
		for i, c := range w.order {
			w.served[i] = c.spec
		}
	}
	return w, nil
}

// wrap applies the middleware around the handler; a panic in the handler
// becomes a *PanicError the middleware sees as the handler's error.
func wrap(h HandlerSpec, outer []Middleware) Handler {
	inner := h.handler
	handler := func(ctx context.Context, head a2redis.HeadEvent) (events []a2redis.Event, err error) {
		defer func() {
			if r := recover(); r != nil {
				events, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		return inner(ctx, head)
	}
	for i := len(h.middlewares) - 1; i >= 0; i-- {
		handler = h.middlewares[i](handler)
	}
	for i := len(outer) - 1; i >= 0; i-- {
		handler = outer[i](handler)
	}
	return handler
}

// missing is the handler of a consumer an AllConsumers worker has none
// for: every head fails with ErrNoHandler.
func missing(name string) Handler {
	return func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) {
		return nil, fmt.Errorf("%w for consumer %q", ErrNoHandler, name)
	}
}

// ID returns the worker's holder name (Config.ID).
func (w *Worker) ID() string { return w.cfg.ID }

// turn is a session's turn in this worker: a claim's heads, then the lane
// heads chained after them, chainQuantum at most while other sessions wait.
type turn struct{ chained atomic.Int64 }

// admitLocked starts (or queues) a claimed head of turn t (nil: a turn of
// its own); its slot is already counted.
func (w *Worker) admitLocked(session string, h a2redis.HeadEvent, leaseFrom time.Time, t *turn) {
	if t == nil {
		t = new(turn)
	}
	w.admitChainLocked(session, h, leaseFrom, t)
}

// admitChainLocked starts (or queues) a head of turn t: claimed, or
// claimed with its lane's previous head's completion (then counted in t).
func (w *Worker) admitChainLocked(session string, h a2redis.HeadEvent, leaseFrom time.Time, t *turn) {
	c := w.consumers[h.Consumer]
	if c == nil && w.cfg.AllConsumers {
		c = &consumer{spec: a2redis.Consumer{Name: h.Consumer}, backoff: w.cfg.Backoff, handler: missing(h.Consumer)}
		w.consumers[h.Consumer] = c
	}
	if c == nil {
		// Claims serve only handled consumers; this cannot happen, but a
		// head nobody runs must not stay claimed.
		w.freeSlotLocked()
		w.busy++
		go w.releaseHeads(session, []a2redis.HeadEvent{h})
		return
	}
	ctx, cancel := context.WithCancelCause(w.hctx)
	j := &job{
		key:     headKey{session: session, consumer: h.Consumer, lane: h.Lane, index: h.Index},
		session: session, head: h, c: c, ctx: ctx, cancel: cancel,
		leaseUntil: leaseFrom.Add(w.cfg.TTL), done: make(chan struct{}), turn: t,
	}
	if old := w.held[j.key]; old != nil {
		// A newer attempt of a head this process still runs: the old one
		// is superseded; the new one waits for it to return.
		w.loseLocked(old)
		j.prev = old
	}
	w.held[j.key] = j
	w.active[session]++
	if c.limit > 0 && c.running >= c.limit {
		j.state = jobQueued
		c.queue = append(c.queue, j)
		return
	}
	j.state = jobRunning
	c.running++
	go w.run(j)
}

// admitNextLocked takes in the lane heads a batched completion claimed:
// each runs in a slot its predecessor kept (slots of them; turns gives the
// predecessor's turn by laneKey), else in a free slot;
// what finds none, or comes while the worker stops, is released. Kept
// slots left over are freed.
func (w *Worker) admitNextLocked(session string, heads []a2redis.HeadEvent, slots int, turns map[string]*turn, leaseFrom time.Time) {
	var release []a2redis.HeadEvent
	for _, h := range heads {
		switch {
		case w.stopping:
			release = append(release, h)
		case slots > 0:
			slots--
			t := turns[laneKey(h.Consumer, h.Lane)]
			if t == nil {
				t = new(turn)
			}
			t.chained.Add(1)
			w.admitChainLocked(session, h, leaseFrom, t)
		case w.free > 0:
			w.free--
			w.admitLocked(session, h, leaseFrom, nil)
		default:
			release = append(release, h)
		}
	}
	for range slots {
		w.freeSlotLocked()
	}
	if len(release) > 0 {
		w.busy++
		go w.releaseHeads(session, release)
	}
}

// laneKey names a consumer's lane in a session's batch.
func laneKey(consumer, lane string) string { return consumer + "\x00" + lane }

// releaseHeads gives back heads this worker claimed but will not run.
func (w *Worker) releaseHeads(session string, heads []a2redis.HeadEvent) {
	defer func() {
		w.mu.Lock()
		w.busy--
		w.checkDrainedLocked()
		w.mu.Unlock()
	}()
	for chunk := range slices.Chunk(heads, w.cfg.CompleteBatch) {
		attempts := make([]redisstore.Attempt, len(chunk))
		for i, h := range chunk {
			attempts[i] = redisstore.AttemptOf(h)
		}
		_, err := w.store.Release(w.wctx, redisstore.ReleaseRequest{Session: session, Attempts: attempts})
		if err != nil {
			w.runtimeError(w.wctx, nil, fmt.Errorf("worker: releasing %d unstarted claims in session %q: %w", len(chunk), session, err))
		}
	}
}

func (w *Worker) freeSlotLocked() {
	w.free++
	signal(w.kick)
}

// loseLocked marks a job's claim lost and cancels its handler.
func (w *Worker) loseLocked(j *job) {
	if j.lost {
		return
	}
	j.lost = true
	if j.state != jobSettling {
		j.cancel(ErrLeaseLost)
	}
}

// leaveLocked takes a job off its consumer's and session's counts as its
// handler returns (running) or it leaves the queue unstarted, and starts
// queued jobs that now fit.
func (w *Worker) leaveLocked(j *job, running bool) {
	c := j.c
	if running {
		c.running--
	} else if i := slices.Index(c.queue, j); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
	for !w.stopping && len(c.queue) > 0 && (c.limit == 0 || c.running < c.limit) {
		next := c.queue[0]
		c.queue = c.queue[1:]
		next.state = jobRunning
		c.running++
		go w.run(next)
	}
	if w.active[j.session]--; w.active[j.session] == 0 {
		delete(w.active, j.session)
		w.sessionIdle(j.session)
	}
}

// settle forgets a job whose outcome is known and reports it.
func (w *Worker) settle(j *job, o Outcome) {
	w.mu.Lock()
	if w.held[j.key] == j {
		delete(w.held, j.key)
	}
	w.checkDrainedLocked()
	w.mu.Unlock()
	close(j.done)
	j.cancel(nil)
	if o.Kind != OutcomeLeaseLost && o.Kind != OutcomeWriteFailed && w.perSession(j.head.Consumer) {
		// The head's place under its consumer's PerSession limit is free:
		// the session's next head may have waited for it (claims that
		// found it at its limit skip it for a while), so the next claim
		// tries the session first.
		w.inbox.add(notify.WorkNotice{Session: j.session})
	}
	w.report(context.WithoutCancel(j.ctx), o)
}

// perSession reports whether the registry gives consumer a PerSession
// limit (the store's copy: no call to Redis).
func (w *Worker) perSession(consumer string) bool {
	c, ok := w.store.Consumer(consumer)
	return ok && c.PerSession > 0
}

func (w *Worker) checkDrainedLocked() {
	if w.stopping && len(w.held) == 0 && w.busy == 0 && !w.drainedClosed {
		w.drainedClosed = true
		close(w.drained)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
