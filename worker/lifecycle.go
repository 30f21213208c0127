package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/a2redis/a2redis/redisstore"
)

// The lifecycle: Run starts the parts (the work-channel watch, the repair
// loop, the schedules, renewal, the heartbeat and the dispatcher), waits for the end, and
// stops them in order: no more claims, queued heads released, the soft
// phase (StopTimeout), the handlers cancelled, all within StopDeadline;
// then renewal and the heartbeat end and the worker deregisters.

// lifecycle holds Run's and Shutdown's signals.
type lifecycle struct {
	stop     chan struct{} // closed by Shutdown
	stopOnce sync.Once
	cut      chan struct{} // closed when Shutdown's context ends first
	cutOnce  sync.Once
	done     chan struct{} // closed when Run returns
	err      error         // what Run returned (read after done)
}

func newLifecycle() lifecycle {
	return lifecycle{stop: make(chan struct{}), cut: make(chan struct{}), done: make(chan struct{})}
}

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
	defer close(w.life.done)

	base := context.WithoutCancel(ctx)
	w.hctx, w.hcancel = context.WithCancelCause(base)
	w.wctx, w.wcancel = context.WithCancel(base)
	defer w.hcancel(ErrShutdown)
	defer w.wcancel()

	select {
	case <-w.life.stop:
		w.life.err = nil
		if f := w.cfg.Hooks.OnStop; f != nil {
			f(nil)
		}
		return nil
	default:
	}

	// The parts: those that find work stop as the stop begins, renewal
	// and the heartbeat once it ends. Each runs on a context of its own
	// under parts, which Run's return cancels whatever happened.
	parts, endParts := context.WithCancel(base)
	defer endParts()
	watchErr := make(chan error, 1)
	finders := []*part{startPart(parts, func(ctx context.Context) { w.watch(ctx, watchErr) })}
	if w.cfg.RepairEvery > 0 {
		finders = append(finders, startPart(parts, w.repairLoop))
	}
	if w.cfg.Retention != nil {
		finders = append(finders, startPart(parts, w.retentionLoop))
	}
	if w.schedules != nil {
		finders = append(finders, startPart(parts, func(ctx context.Context) { _ = w.schedules.Run(ctx) }))
	}
	renewal := startPart(parts, w.renewLoop)
	w.startedAt = time.Now()
	heartbeat := startPart(parts, w.heartbeatLoop)
	dispatcher := startPart(parts, w.dispatch)
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
	case <-w.life.stop:
	case err = <-watchErr:
		w.runtimeError(ctx, nil, err)
	}
	err = errors.Join(err, w.stop(finders, dispatcher))
	renewal.cancel()
	heartbeat.stop()
	w.deregister()
	w.wcancel()
	for _, p := range finders {
		<-p.done
	}
	<-renewal.done
	w.life.err = err
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
	w.life.stopOnce.Do(func() { close(w.life.stop) })
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.life.done:
		return w.life.err
	case <-ctx.Done():
		w.life.cutOnce.Do(func() { close(w.life.cut) })
		return ctx.Err()
	}
}

// part is one of the worker's goroutines (the work-channel watch, the
// repair loop, the dispatcher, renewal, the heartbeat): each is started the
// same way, on a context of its own, and stopped by cancelling it.
type part struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when it returned
}

// startPart runs f in a goroutine on a context of its own, made from base.
func startPart(base context.Context, f func(ctx context.Context)) *part {
	ctx, cancel := context.WithCancel(base)
	p := &part{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		f(ctx)
	}()
	return p
}

// stop cancels the part and waits until it returned.
func (p *part) stop() {
	p.cancel()
	<-p.done
}

// stop runs the graceful stop: no more claims (the finders and the
// dispatcher end), the soft phase, then the cancellation of what still
// runs, within the hard deadline.
func (w *Worker) stop(finders []*part, dispatcher *part) error {
	hard := time.NewTimer(w.cfg.StopDeadline)
	defer hard.Stop()
	soft := time.NewTimer(w.cfg.StopTimeout)
	defer soft.Stop()
	for _, p := range finders {
		p.cancel()
	}
	dispatcher.cancel()
	w.mu.Lock()
	w.stopping = true
	in := len(w.held)
	w.flushAll()
	queued := w.unqueueLocked()
	w.checkDrainedLocked()
	w.mu.Unlock()
	w.log.Info("worker stopping", "worker", w.cfg.ID, "held", in)
	for session, jobs := range queued {
		go w.releaseJobs(session, jobs)
	}
	select {
	case <-dispatcher.done:
	case <-hard.C:
		// The dispatcher is stuck in a store call (a claim on a cluster
		// that does not answer), not in a handler.
		return w.abandoned("a claim call had not returned")
	}
	select {
	case <-w.drained:
		return nil
	case <-soft.C:
	case <-w.life.cut:
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
		attempts := make([]redisstore.Attempt, len(chunk))
		for i, j := range chunk {
			attempts[i] = redisstore.AttemptOf(j.head)
		}
		outcomes, err := w.store.Release(w.wctx, redisstore.ReleaseRequest{Session: session, Attempts: attempts})
		for i, j := range chunk {
			o := Outcome{Head: j.head, Kind: OutcomeReleased}
			switch {
			case err != nil:
				o.Kind, o.Err = OutcomeWriteFailed, err
			case outcomes[i] == redisstore.ReleaseSuperseded:
				o.Kind = OutcomeSuperseded
			}
			w.settle(j, o)
		}
	}
}
