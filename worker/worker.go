package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// Worker runs handlers for consumers of one store: it finds work through
// the ready index and its wake-ups, claims heads for its free slots, runs
// them, renews their leases and records their outcomes. Build it with New,
// run it with Run; it is safe for concurrent use.
type Worker struct {
	store     *redisstore.Store
	cfg       Config
	log       *slog.Logger
	consumers map[string]*consumer
	order     []*consumer
	// served is what claims and batched completions name as their
	// Consumers: nil when the worker handles every declared consumer.
	served  []a2redis.Consumer
	limited bool // some consumer has MaxInFlight

	renewGate atomic.Pointer[func()]      // tests: called before each renewal round
	beatGate  atomic.Pointer[func() bool] // tests: called before each heartbeat; false skips it
	startedAt time.Time                   // when Run started

	wake chan struct{} // a work notice arrived
	kick chan struct{} // a slot freed

	stopCh   chan struct{}
	stopOnce sync.Once
	cutCh    chan struct{}
	cutOnce  sync.Once
	done     chan struct{}
	runErr   error

	// Set by Run before any goroutine starts.
	hctx    context.Context // handlers' parent: cancelled when Run returns
	hcancel context.CancelCauseFunc
	wctx    context.Context // store calls: cancelled when Run returns
	wcancel context.CancelFunc

	mu            sync.Mutex
	started       bool
	stopping      bool
	free          int
	held          map[headKey]*job
	sessions      map[string]*sessionState
	woken         []string
	wokenSet      map[string]bool
	dirty         bool
	holdAt        time.Time // the earliest end of a hold this worker set since the dispatcher last looked
	busy          int       // releases in flight outside any job
	drained       chan struct{}
	drainedClosed bool
}

// consumer is one handled consumer.
type consumer struct {
	spec    a2redis.Consumer
	handler Handler
	limit   int
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
	prev       *job // an earlier attempt of the same head, still running here
	done       chan struct{}
}

// sessionState batches one session's completions.
type sessionState struct {
	active   int    // the session's queued and running jobs
	batch    []*job // completions waiting to be written
	flushing bool
	timer    *time.Timer
}

// wokenPerClaim is how many woken sessions one ClaimNext names, and
// maxWoken how many wait (beyond, the index is read instead).
const (
	wokenPerClaim = 4
	maxWoken      = 1024
	renewParallel = 16
	// claimLinger is how long a busy worker whose slots free one by one
	// waits for more to free before it claims (at most once per claim),
	// so that claims stay large under load.
	claimLinger = time.Millisecond
)

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
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		stopCh: make(chan struct{}), cutCh: make(chan struct{}), done: make(chan struct{}),
		free: cfg.Concurrency, held: map[headKey]*job{}, sessions: map[string]*sessionState{},
		wokenSet: map[string]bool{}, drained: make(chan struct{}),
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
				return nil, check.Invalid(field, "names consumer %q, which the store's Config.Consumers does not declare", h.consumer)
			}
			spec = d
		}
		c := &consumer{spec: spec, limit: h.limit, backoff: h.backoff, timeout: h.timeout, handler: wrap(h, cfg.Middleware)}
		if c.backoff == nil {
			c.backoff = cfg.Backoff
		}
		w.limited = w.limited || c.limit > 0
		w.consumers[h.consumer] = c
		w.order = append(w.order, c)
	}
	if (len(declared) == 0 && !cfg.AllConsumers) || (len(declared) > 0 && len(w.order) < len(declared)) {
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

// Run runs the worker until ctx is cancelled or Shutdown is called, then
// stops gracefully: it stops claiming, lets in-flight handlers finish for
// up to Config.StopTimeout, then cancels them (cause ErrShutdown) and
// releases their claims without counting failures; Config.StopDeadline
// bounds the whole stop. It returns nil after a clean stop, an error
// matching ErrStopDeadline when handlers outran the deadline, or the error
// that ended it (the server refused the work-channel subscription). A
// Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrRunning
	}
	w.started = true
	w.mu.Unlock()
	defer close(w.done)

	base := context.WithoutCancel(ctx)
	w.hctx, w.hcancel = context.WithCancelCause(base)
	w.wctx, w.wcancel = context.WithCancel(base)
	loopCtx, loopCancel := context.WithCancel(base)
	defer w.hcancel(ErrShutdown)
	defer w.wcancel()
	defer loopCancel()

	select {
	case <-w.stopCh:
		w.runErr = nil
		if f := w.cfg.Hooks.OnStop; f != nil {
			f(nil)
		}
		return nil
	default:
	}

	var bg sync.WaitGroup
	watchErr := make(chan error, 1)
	bg.Go(func() { w.watch(loopCtx, watchErr) })
	if w.cfg.RepairEvery > 0 {
		bg.Go(func() { w.repairLoop(loopCtx) })
	}
	renewCtx, renewStop := context.WithCancel(base)
	defer renewStop()
	bg.Go(func() { w.renewLoop(renewCtx) })
	w.startedAt = time.Now()
	beatCtx, beatStop := context.WithCancel(base)
	defer beatStop()
	var beat sync.WaitGroup
	beat.Go(func() { w.heartbeatLoop(beatCtx) })
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		w.dispatch(loopCtx)
	}()
	names := make([]string, len(w.order))
	for i, c := range w.order {
		names[i] = c.spec.Name
	}
	w.log.Info("worker started", "worker", w.cfg.ID, "consumers", names, "concurrency", w.cfg.Concurrency, "prefix", w.store.Prefix())
	if f := w.cfg.Hooks.OnStart; f != nil {
		f(ctx)
	}

	var err error
	select {
	case <-ctx.Done():
	case <-w.stopCh:
	case err = <-watchErr:
		w.runtimeError(ctx, nil, err)
	}
	err = errors.Join(err, w.stop(loopCancel, dispatched))
	renewStop()
	beatStop()
	beat.Wait()
	w.deregister()
	w.wcancel()
	bg.Wait()
	w.runErr = err
	w.log.Info("worker stopped", "worker", w.cfg.ID, "err", err)
	if f := w.cfg.Hooks.OnStop; f != nil {
		f(err)
	}
	return err
}

// Shutdown stops the worker as cancelling Run's context does, and waits
// until Run has returned (then it returns Run's error) or ctx ends. When
// ctx ends first, in-flight handlers are cancelled at once (their claims
// released) instead of after Config.StopTimeout, and Shutdown returns
// ctx.Err(); Run still returns within Config.StopDeadline. Shutdown before
// Run makes Run return at once.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopCh) })
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.done:
		return w.runErr
	case <-ctx.Done():
		w.cutOnce.Do(func() { close(w.cutCh) })
		return ctx.Err()
	}
}

// stop runs the graceful stop: no more claims, the soft phase, then the
// cancellation of what still runs, within the hard deadline.
func (w *Worker) stop(loopCancel context.CancelFunc, dispatched <-chan struct{}) error {
	hard := time.NewTimer(w.cfg.StopDeadline)
	defer hard.Stop()
	soft := time.NewTimer(w.cfg.StopTimeout)
	defer soft.Stop()
	loopCancel()
	w.mu.Lock()
	w.stopping = true
	in := len(w.held)
	for session, st := range w.sessions {
		w.maybeFlushLocked(session, st)
	}
	queued := w.unqueueLocked()
	w.checkDrainedLocked()
	w.mu.Unlock()
	w.log.Info("worker stopping", "worker", w.cfg.ID, "held", in)
	for session, jobs := range queued {
		go w.releaseJobs(session, jobs)
	}
	select {
	case <-dispatched:
	case <-hard.C:
		// The dispatcher is stuck in a store call (a claim on a cluster
		// that does not answer), not in a handler.
		return w.abandoned("a claim call had not returned")
	}
	select {
	case <-w.drained:
		return nil
	case <-soft.C:
	case <-w.cutCh:
	case <-hard.C:
		return w.abandoned("")
	}
	w.cut()
	select {
	case <-w.drained:
		return nil
	case <-hard.C:
		return w.abandoned("")
	}
}

// abandoned is Run's error when StopDeadline passed; why, when set, says
// what was still running besides the handlers.
func (w *Worker) abandoned(why string) error {
	w.mu.Lock()
	n := len(w.held)
	w.mu.Unlock()
	w.log.Error("worker stop deadline passed", "worker", w.cfg.ID, "held", n, "why", why)
	if why != "" {
		return fmt.Errorf("%w: %s; %d claims left to lapse", ErrStopDeadline, why, n)
	}
	return fmt.Errorf("%w: %d claims left to lapse", ErrStopDeadline, n)
}

// cut ends the soft phase: running handlers are cancelled (they release
// their claims as they return).
func (w *Worker) cut() {
	w.mu.Lock()
	cancelled := 0
	for _, j := range w.held {
		if j.state == jobRunning && !j.stopped {
			j.stopped = true
			j.cancel(ErrShutdown)
			cancelled++
		}
	}
	w.mu.Unlock()
	w.log.Info("worker cancelling handlers", "worker", w.cfg.ID, "running", cancelled)
}

// unqueueLocked takes every queued job (claimed beyond its consumer's
// MaxInFlight, never started) off its queue for release, as a stop begins.
func (w *Worker) unqueueLocked() map[string][]*job {
	bySession := map[string][]*job{}
	for _, c := range w.order {
		for len(c.queue) > 0 {
			j := c.queue[0]
			w.leaveLocked(j, false)
			j.state = jobSettling
			j.stopped = true
			w.freeSlotLocked()
			bySession[j.session] = append(bySession[j.session], j)
		}
	}
	return bySession
}

// releaseJobs gives back the claims of jobs that never ran.
func (w *Worker) releaseJobs(session string, jobs []*job) {
	for chunk := range slices.Chunk(jobs, w.cfg.CompleteBatch) {
		attempts := make([]redisstore.Completion, len(chunk))
		for i, j := range chunk {
			attempts[i] = redisstore.Completion{Head: j.head.Ref(), Attempt: j.head.Attempts}
		}
		var outcomes []redisstore.ReleaseOutcome
		err := w.write(w.wctx, func(ctx context.Context) (err error) {
			outcomes, err = w.store.Release(ctx, redisstore.ReleaseRequest{Session: session, Attempts: attempts})
			return err
		})
		for i, j := range chunk {
			o := Outcome{Head: j.head, Kind: Released}
			switch {
			case err != nil:
				o.Kind, o.Err = WriteFailed, err
			case outcomes[i] == redisstore.ReleaseSuperseded:
				o.Kind = Superseded
			}
			w.settle(j, o)
		}
	}
}

// releaseHeads gives back heads this worker claimed but will not run.
func (w *Worker) releaseHeads(session string, heads []a2redis.HeadEvent) {
	defer func() {
		w.mu.Lock()
		w.busy--
		w.checkDrainedLocked()
		w.mu.Unlock()
	}()
	for chunk := range slices.Chunk(heads, w.cfg.CompleteBatch) {
		attempts := make([]redisstore.Completion, len(chunk))
		for i, h := range chunk {
			attempts[i] = redisstore.Completion{Head: h.Ref(), Attempt: h.Attempts}
		}
		err := w.write(w.wctx, func(ctx context.Context) error {
			_, err := w.store.Release(ctx, redisstore.ReleaseRequest{Session: session, Attempts: attempts})
			return err
		})
		if err != nil {
			w.runtimeError(w.wctx, nil, fmt.Errorf("worker: releasing %d unstarted claims in session %q: %w", len(chunk), session, err))
		}
	}
}

// watch follows the work channels until ctx ends.
func (w *Worker) watch(ctx context.Context, errc chan<- error) {
	ww := notify.NewWorkWatcher(w.store.Client(), w.store.Prefix(), w.store.ReadyShards(), notify.SubscriberOptions{Sharded: w.store.ShardedPubSub()})
	err := ww.Watch(ctx, func(n notify.WorkNotice) error {
		w.notice(n)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		errc <- fmt.Errorf("worker: watching for work: %w", err)
	}
}

func (w *Worker) notice(n notify.WorkNotice) {
	w.mu.Lock()
	switch {
	case n.Gap || n.Session == "":
		w.dirty = true
	case w.wokenSet[n.Session]:
	case len(w.woken) < maxWoken:
		w.woken = append(w.woken, n.Session)
		w.wokenSet[n.Session] = true
	default:
		w.dirty = true
	}
	w.mu.Unlock()
	signal(w.wake)
}

// poke makes the dispatcher read the index again.
func (w *Worker) poke() {
	w.mu.Lock()
	w.dirty = true
	w.mu.Unlock()
	signal(w.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// repairLoop runs the ready-index repair every RepairEvery (one worker per
// prefix and interval runs the pass).
func (w *Worker) repairLoop(ctx context.Context) {
	every := w.cfg.RepairEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ran, st, err := w.store.TryRepairReady(ctx, every)
		switch {
		case err != nil && ctx.Err() == nil:
			w.runtimeError(ctx, nil, fmt.Errorf("worker: repairing the ready index: %w", err))
		case ran:
			w.log.Debug("ready index repaired", "worker", w.cfg.ID, "sessions", st.Sessions, "sent", st.Sent)
			if st.Sent > 0 {
				w.poke()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dispatch is the claim loop: it waits for a wake-up, the time the index
// names, or a freed slot, then claims up to the free slots.
func (w *Worker) dispatch(ctx context.Context) {
	// dirty: the index may list due work this worker has not claimed.
	dirty := true
	// narrowed: the last claim that found nothing left out a consumer at
	// its MaxInFlight, so a freed slot may find that consumer work.
	narrowed := false
	lingered := false
	floor := max(1, w.cfg.Concurrency/4)
	var nextAt time.Time
	var errWait time.Duration
	for ctx.Err() == nil {
		w.mu.Lock()
		if w.dirty {
			dirty, w.dirty = true, false
		}
		if !w.holdAt.IsZero() {
			if nextAt.IsZero() || w.holdAt.Before(nextAt) {
				nextAt = w.holdAt
			}
			w.holdAt = time.Time{}
		}
		served, limit, narrow := w.scopeLocked()
		if limit > 0 && limit < floor && w.free < w.cfg.Concurrency && (dirty || len(w.woken) > 0) && !lingered {
			// Busy, and slots free one by one: wait a moment for more.
			w.mu.Unlock()
			lingered = true
			sleep(ctx, claimLinger)
			continue
		}
		lingered = false
		var sessions []string
		if limit > 0 && len(w.woken) > 0 {
			n := min(len(w.woken), wokenPerClaim)
			sessions = slices.Clone(w.woken[:n])
			w.woken = w.woken[n:]
			for _, s := range sessions {
				delete(w.wokenSet, s)
			}
		}
		w.mu.Unlock()
		if limit > 0 && (dirty || len(sessions) > 0) {
			leaseFrom := time.Now()
			res, err := w.store.ClaimNext(w.wctx, redisstore.ClaimNextRequest{
				Holder: w.cfg.ID, TTL: w.cfg.TTL, Consumers: served, MaxFailures: w.cfg.MaxFailures,
				Limit: limit, Sessions: sessions,
			})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				w.runtimeError(ctx, nil, fmt.Errorf("worker: claiming: %w", err))
				// A refusal (a slot migrating, a failover) passes soon.
				most := 5 * time.Second
				if errors.Is(err, a2redis.ErrUnavailable) {
					most = 500 * time.Millisecond
				}
				errWait = min(max(2*errWait, 50*time.Millisecond), most)
				dirty = true
				sleep(ctx, errWait)
				continue
			}
			errWait = 0
			if res.Outcome == redisstore.Claimed {
				if !w.admitClaim(ctx, res, leaseFrom, sessions, limit) {
					// From the index: other sessions may be due too.
					dirty, nextAt = true, time.Time{}
				}
				continue
			}
			dirty, nextAt, narrowed = false, res.NextAt, narrow
		}
		wait := w.cfg.MaxWait
		if !dirty && !nextAt.IsZero() {
			wait = min(max(nextAt.Sub(w.store.Now()), time.Millisecond), w.cfg.MaxWait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-w.kick:
			if narrowed {
				dirty, narrowed = true, false
			}
		case <-t.C:
			dirty, nextAt = true, time.Time{}
		}
		t.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// scopeLocked returns the consumers the next claim serves and how many
// heads it may take: the free slots, and no consumer at its MaxInFlight
// (narrowed reports that one was left out).
func (w *Worker) scopeLocked() (served []a2redis.Consumer, limit int, narrowed bool) {
	if w.free <= 0 || w.stopping {
		return nil, 0, false
	}
	if !w.limited {
		return w.served, w.free, false
	}
	var open []a2redis.Consumer
	room, unlimited := 0, false
	for _, c := range w.order {
		if c.limit == 0 {
			open = append(open, c.spec)
			unlimited = true
			continue
		}
		if r := c.limit - c.running - len(c.queue); r > 0 {
			open = append(open, c.spec)
			room += r
		}
	}
	if len(open) == 0 {
		return nil, 0, true
	}
	served = open
	if len(open) == len(w.order) {
		served = w.served
	}
	limit = w.free
	if !unlimited {
		limit = min(limit, room)
	}
	return served, limit, len(open) < len(w.order)
}

// admitClaim takes in what a ClaimNext claimed, and reports whether it
// came from a session a wake-up named (not from reading the index).
func (w *Worker) admitClaim(ctx context.Context, res redisstore.ClaimNextResult, leaseFrom time.Time, sessions []string, limit int) bool {
	w.mu.Lock()
	i := slices.Index(sessions, res.Session)
	if i >= 0 {
		// ClaimNext stopped at this one: the later named sessions were
		// not tried, and this one may have more when the claim was full.
		rest := sessions[i+1:]
		if len(res.Heads)+len(res.DeadLettered) >= limit {
			rest = sessions[i:]
		}
		var back []string
		for _, s := range rest {
			if !w.wokenSet[s] {
				w.wokenSet[s] = true
				back = append(back, s)
			}
		}
		w.woken = append(back, w.woken...)
	}
	if w.stopping {
		if len(res.Heads) > 0 {
			w.busy++
			w.mu.Unlock()
			w.releaseHeads(res.Session, res.Heads)
		} else {
			w.mu.Unlock()
		}
	} else {
		w.free -= len(res.Heads)
		for _, h := range res.Heads {
			w.admitLocked(res.Session, h, leaseFrom)
		}
		w.mu.Unlock()
	}
	for _, h := range res.DeadLettered {
		w.report(ctx, Outcome{Head: h, Kind: DeadLettered, Failures: h.Failures})
	}
	return i >= 0
}

// admitLocked starts (or queues) a claimed head; its slot is already
// counted.
func (w *Worker) admitLocked(session string, h a2redis.HeadEvent, leaseFrom time.Time) {
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
		leaseUntil: leaseFrom.Add(w.cfg.TTL), done: make(chan struct{}),
	}
	if old := w.held[j.key]; old != nil {
		// A newer attempt of a head this process still runs: the old one
		// is superseded; the new one waits for it to return.
		w.loseLocked(old)
		j.prev = old
	}
	w.held[j.key] = j
	w.sessionLocked(session).active++
	if c.limit > 0 && c.running >= c.limit {
		j.state = jobQueued
		c.queue = append(c.queue, j)
		return
	}
	j.state = jobRunning
	c.running++
	go w.run(j)
}

func (w *Worker) sessionLocked(session string) *sessionState {
	st := w.sessions[session]
	if st == nil {
		st = &sessionState{}
		w.sessions[session] = st
	}
	return st
}

func (w *Worker) dropSessionLocked(session string, st *sessionState) {
	if st.active == 0 && len(st.batch) == 0 && !st.flushing && st.timer == nil {
		delete(w.sessions, session)
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
	if st := w.sessions[j.session]; st != nil {
		st.active--
		if st.active == 0 {
			w.maybeFlushLocked(j.session, st)
		}
	}
}

// run runs a job's handler and records its outcome.
func (w *Worker) run(j *job) {
	if j.prev != nil {
		<-j.prev.done
	}
	if j.ctx.Err() != nil {
		w.finish(j, nil, context.Cause(j.ctx), 0)
		return
	}
	events, ran, err := w.invoke(j)
	w.finish(j, events, err, ran)
}

func (w *Worker) invoke(j *job) (events []a2redis.Event, ran time.Duration, err error) {
	ctx := j.ctx
	if j.c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.c.timeout)
		defer cancel()
	}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil { // a middleware panicked
			events, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
		}
		ran = time.Since(start)
	}()
	events, err = j.c.handler(ctx, j.head)
	return events, 0, err
}

// finish records a job's outcome once its handler returned.
func (w *Worker) finish(j *job, events []a2redis.Event, err error, ran time.Duration) {
	w.mu.Lock()
	w.leaveLocked(j, j.state == jobRunning)
	j.state = jobSettling
	lost, stopped := j.lost, j.stopped
	batched := err == nil && len(events) == 0 && !lost
	j.keepSlot = batched && j.head.Lane != "" && !w.stopping
	if !j.keepSlot {
		w.freeSlotLocked()
	}
	if batched {
		st := w.sessionLocked(j.session)
		st.batch = append(st.batch, j)
		w.maybeFlushLocked(j.session, st)
	}
	w.mu.Unlock()
	if batched {
		return
	}
	o := Outcome{Head: j.head, Err: err, Duration: ran}
	var snooze *SnoozeError
	switch {
	case lost:
		o.Kind = LeaseLost
	case err == nil:
		w.complete(j, events, &o)
	case errors.As(err, &snooze):
		o.RetryAfter = max(snooze.Delay, 0)
		w.release(j, o.RetryAfter, Snoozed, &o)
	case stopped:
		w.release(j, 0, Released, &o)
	default:
		w.fail(j, err, errors.Is(err, ErrPermanent), &o)
	}
	if o.Kind == Failed || o.Kind == Snoozed {
		// No wake-up announces the end of a hold: look again then.
		w.holdEnds(w.store.Now().Add(o.RetryAfter))
	}
	w.settle(j, o)
}

// holdEnds makes the dispatcher look at the index again at `at` (the
// store's clock) at the latest.
func (w *Worker) holdEnds(at time.Time) {
	w.mu.Lock()
	if w.holdAt.IsZero() || at.Before(w.holdAt) {
		w.holdAt = at
	}
	w.mu.Unlock()
	signal(w.wake)
}

// complete records a completion that returned events.
func (w *Worker) complete(j *job, events []a2redis.Event, o *Outcome) {
	var res redisstore.CompleteResult
	err := w.write(w.wctx, func(ctx context.Context) (err error) {
		res, err = w.store.CompleteAttempt(ctx, redisstore.CompleteRequest{
			Session: j.session, Head: j.head.Ref(), Attempt: j.head.Attempts, Events: events,
		})
		return err
	})
	switch {
	case errors.Is(err, a2redis.ErrSupersededAttempt):
		o.Kind = Superseded
	case err != nil:
		o.Kind, o.Err = WriteFailed, fmt.Errorf("worker: completing: %w", err)
	case res.Outcome == redisstore.CompleteSuperseded:
		o.Kind = Superseded
	default:
		o.Kind, o.Events = Completed, res.Events
	}
}

// release gives a job's claim back without a failure.
func (w *Worker) release(j *job, delay time.Duration, kind OutcomeKind, o *Outcome) {
	var out []redisstore.ReleaseOutcome
	err := w.write(w.wctx, func(ctx context.Context) (err error) {
		out, err = w.store.Release(ctx, redisstore.ReleaseRequest{
			Session: j.session, Attempts: []redisstore.Completion{{Head: j.head.Ref(), Attempt: j.head.Attempts}}, Delay: delay,
		})
		return err
	})
	switch {
	case err != nil:
		o.Kind, o.Err = WriteFailed, fmt.Errorf("worker: releasing: %w", err)
	case out[0] == redisstore.ReleaseSuperseded:
		o.Kind = Superseded
	default:
		o.Kind = kind
	}
}

// fail records a failed attempt with the consumer's backoff, or a
// permanent one that dead-letters at once.
func (w *Worker) fail(j *job, err error, permanent bool, o *Outcome) {
	maxFailures, retry := w.cfg.MaxFailures, time.Duration(0)
	if permanent {
		maxFailures = 1
	} else {
		retry = max(j.c.backoff(j.head.Failures+1, err), 0)
	}
	var res redisstore.FailResult
	werr := w.write(w.wctx, func(ctx context.Context) (e error) {
		res, e = w.store.FailAttempt(ctx, redisstore.FailRequest{
			Session: j.session, Head: j.head.Ref(), Attempt: j.head.Attempts, Error: errorText(err),
			MaxFailures: maxFailures, RetryAfter: retry,
		})
		return e
	})
	switch {
	case werr != nil:
		o.Kind, o.Err = WriteFailed, fmt.Errorf("worker: recording the failure %q: %w", errorText(err), werr)
	case res.Outcome == redisstore.FailSuperseded:
		o.Kind = Superseded
	case res.Outcome == redisstore.DeadLettered:
		o.Kind, o.Failures = DeadLettered, res.Failures
	default:
		o.Kind, o.Failures, o.RetryAfter = Failed, res.Failures, retry
	}
}

// errorText is the error text recorded on a failed head: valid UTF-8, at
// most maxErrorText bytes.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// maybeFlushLocked writes a session's batched completions now if nothing
// else of the session runs here (or the batch is full, or the worker
// stops), else once CompleteLinger has passed.
func (w *Worker) maybeFlushLocked(session string, st *sessionState) {
	if st.flushing || len(st.batch) == 0 {
		return
	}
	if w.stopping || st.active == 0 || len(st.batch) >= w.cfg.CompleteBatch || w.cfg.CompleteLinger < 0 {
		w.flushNowLocked(session, st)
		return
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(w.cfg.CompleteLinger, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
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
	go w.flush(session, jobs, w.stopping)
}

// flush completes a batch of one session's heads that returned no events
// in one script call; with lane heads among them (and the worker not
// stopping), the same call claims each lane's next head, which runs in the
// slot its predecessor held.
func (w *Worker) flush(session string, jobs []*job, stopping bool) {
	attempts := make([]redisstore.Completion, len(jobs))
	slots := 0
	for i, j := range jobs {
		attempts[i] = redisstore.Completion{Head: j.head.Ref(), Attempt: j.head.Attempts}
		if j.keepSlot {
			slots++
		}
	}
	req := redisstore.CompleteAttemptsRequest{Session: session, Attempts: attempts, Consumers: w.served}
	leaseFrom := time.Now()
	var results []redisstore.CompleteResult
	var next redisstore.ClaimResult
	claimNext := slots > 0 && !stopping
	err := w.write(w.wctx, func(ctx context.Context) (err error) {
		if claimNext {
			// A retry completes without claiming: the lost reply's
			// claims, if any, are ours and lapse.
			claimNext = false
			var r redisstore.CompleteAndClaimResult
			r, err = w.store.CompleteAndClaim(ctx, req, redisstore.NextClaim{Holder: w.cfg.ID, TTL: w.cfg.TTL})
			results, next = r.Results, r.Next
			return err
		}
		results, err = w.store.CompleteAttempts(ctx, req)
		return err
	})
	w.mu.Lock()
	var release []a2redis.HeadEvent
	if err == nil && next.Outcome == redisstore.Claimed {
		for _, h := range next.Heads {
			switch {
			case w.stopping:
				release = append(release, h)
			case slots > 0:
				slots--
				w.admitLocked(session, h, leaseFrom)
			case w.free > 0:
				w.free--
				w.admitLocked(session, h, leaseFrom)
			default:
				release = append(release, h)
			}
		}
	}
	for range slots {
		w.freeSlotLocked()
	}
	if len(release) > 0 {
		w.busy++
	}
	st := w.sessionLocked(session)
	st.flushing = false
	w.maybeFlushLocked(session, st)
	w.dropSessionLocked(session, st)
	w.mu.Unlock()
	if len(release) > 0 {
		go w.releaseHeads(session, release)
	}
	for i, j := range jobs {
		o := Outcome{Head: j.head, Kind: Completed}
		switch {
		case err != nil:
			o.Kind, o.Err = WriteFailed, fmt.Errorf("worker: completing %d heads: %w", len(jobs), err)
		case results[i].Outcome == redisstore.CompleteSuperseded:
			o.Kind = Superseded
		}
		w.settle(j, o)
	}
}

// settle forgets a job whose outcome is known and reports it.
func (w *Worker) settle(j *job, o Outcome) {
	w.mu.Lock()
	if w.held[j.key] == j {
		delete(w.held, j.key)
	}
	if st := w.sessions[j.session]; st != nil {
		w.dropSessionLocked(j.session, st)
	}
	w.checkDrainedLocked()
	w.mu.Unlock()
	close(j.done)
	j.cancel(nil)
	w.report(context.WithoutCancel(j.ctx), o)
}

func (w *Worker) checkDrainedLocked() {
	if w.stopping && len(w.held) == 0 && w.busy == 0 && !w.drainedClosed {
		w.drainedClosed = true
		close(w.drained)
	}
}

// report logs an outcome and passes it to the hooks.
func (w *Worker) report(ctx context.Context, o Outcome) {
	h := o.Head
	attrs := []any{"worker", w.cfg.ID, "consumer", h.Consumer, "session", h.Session, "index", h.Index, "attempt", h.Attempts}
	if h.Lane != "" {
		attrs = append(attrs, "lane", h.Lane)
	}
	switch o.Kind {
	case Failed:
		w.log.Warn("handler failed", append(attrs, "failures", o.Failures, "retry_after", o.RetryAfter, "err", o.Err)...)
	case DeadLettered:
		if o.Err == nil {
			w.log.Error("head dead-lettered: its claims lapsed MaxFailures times", append(attrs, "failures", o.Failures)...)
		} else {
			w.log.Error("head dead-lettered", append(attrs, "failures", o.Failures, "err", o.Err)...)
		}
	case LeaseLost:
		w.log.Warn("lease lost: the handler's outcome is not recorded", attrs...)
	case Superseded:
		w.log.Warn("outcome refused: the attempt no longer owns its head", attrs...)
	case WriteFailed:
		w.log.Error("recording the outcome failed", append(attrs, "err", o.Err)...)
	default:
		w.log.Debug("head "+string(o.Kind), attrs...)
	}
	if eh := w.cfg.ErrorHandler; eh != nil {
		switch {
		case o.Kind == WriteFailed:
			eh(ctx, &o.Head, o.Err)
		case (o.Kind == Failed || o.Kind == DeadLettered) && o.Err != nil:
			eh(ctx, &o.Head, o.Err)
		}
	}
	if f := w.cfg.Hooks.OnOutcome; f != nil {
		f(ctx, o)
	}
}

func (w *Worker) runtimeError(ctx context.Context, head *a2redis.HeadEvent, err error) {
	w.log.Error("worker error", "worker", w.cfg.ID, "err", err)
	if eh := w.cfg.ErrorHandler; eh != nil {
		eh(ctx, head, err)
	}
}

// write runs a store write, retrying transport errors a few times (every
// write the worker makes is idempotent or fenced).
func (w *Worker) write(ctx context.Context, f func(context.Context) error) error {
	delays := [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond}
	for i := 0; ; i++ {
		err := f(ctx)
		if err == nil || i == len(delays) || !transient(err) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, delays[i])
	}
}

// transient reports whether err may pass on retrying: not one of the
// store's own refusals.
func transient(err error) bool {
	for _, e := range []error{a2redis.ErrInvalidArgument, a2redis.ErrSupersededAttempt, a2redis.ErrNoEvent,
		a2redis.ErrPartialDuplicateBatch, a2redis.ErrUnexpectedReply, a2redis.ErrSessionCleared,
		a2redis.ErrLayoutMismatch, a2redis.ErrRangeGap, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}
