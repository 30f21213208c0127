package worker

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/redisstore"
)

// heartbeatLoop registers the worker in the prefix's worker registry and
// refreshes its record every HeartbeatTTL/3 until ctx ends. The caller
// deregisters once it returns.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatTTL / 3)
	defer t.Stop()
	for {
		skip := false
		if gate := w.beatGate.Load(); gate != nil {
			skip = !(*gate)()
		}
		if !skip {
			if err := workerreg.Of(w.store).Register(ctx, w.workerInfo(), w.cfg.HeartbeatTTL); err != nil && ctx.Err() == nil {
				w.runtimeError(ctx, nil, fmt.Errorf("worker: heartbeat: %w", err))
			}
		}
		w.beats.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deregister removes the worker's record as Run returns (bounded: a store
// that does not answer leaves the record to expire).
func (w *Worker) deregister() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.wctx), min(w.cfg.HeartbeatTTL, 5*time.Second))
	defer cancel()
	if err := workerreg.Of(w.store).Deregister(ctx, w.cfg.ID); err != nil {
		w.runtimeError(ctx, nil, fmt.Errorf("worker: deregistering: %w", err))
	}
}

// workerInfo is the worker's record as of now.
func (w *Worker) workerInfo() redisstore.WorkerInfo {
	info := redisstore.WorkerInfo{
		ID: w.cfg.ID, Host: w.cfg.Host, PID: os.Getpid(), StartedAt: w.startedAt,
		Concurrency: w.cfg.Concurrency, Consumers: make([]string, len(w.order)),
	}
	for i, c := range w.order {
		info.Consumers[i] = c.spec.Name
	}
	w.mu.Lock()
	heads := make([]redisstore.WorkerHead, 0, len(w.held))
	for k, j := range w.held {
		if j.state == jobRunning {
			info.InFlight++
		}
		heads = append(heads, redisstore.WorkerHead{Session: k.session, HeadRef: a2redis.HeadRef{Consumer: k.consumer, Lane: k.lane, Index: k.index}})
	}
	w.mu.Unlock()
	slices.SortFunc(heads, func(a, b redisstore.WorkerHead) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(a.Lane, b.Lane), cmp.Compare(a.Index, b.Index))
	})
	info.HeadsTotal = len(heads)
	info.Heads = heads[:min(len(heads), redisstore.MaxWorkerHeads)]
	return info
}

// report logs an outcome and passes it to the hooks.
func (w *Worker) report(ctx context.Context, o Outcome) {
	h := o.Head
	attrs := []any{"worker", w.cfg.ID, "consumer", h.Consumer, "session", h.Session, "index", h.Index, "attempt", h.Attempts}
	if h.Lane != "" {
		attrs = append(attrs, "lane", h.Lane)
	}
	switch o.Kind {
	case OutcomeFailed:
		w.log.Warn("handler failed", append(attrs, "failures", o.Failures, "retry_after", o.RetryAfter, "err", o.Err)...)
	case OutcomeDeadLettered:
		if o.Err == nil {
			w.log.Error("head dead-lettered: its claims lapsed MaxFailures times", append(attrs, "failures", o.Failures)...)
		} else {
			w.log.Error("head dead-lettered", append(attrs, "failures", o.Failures, "err", o.Err)...)
		}
	case OutcomeLeaseLost:
		w.log.Warn("lease lost: the handler's outcome is not recorded", attrs...)
	case OutcomeSuperseded:
		w.log.Warn("outcome refused: the attempt no longer owns its head", attrs...)
	case OutcomeWriteFailed:
		w.log.Error("recording the outcome failed", append(attrs, "err", o.Err)...)
	default:
		w.log.Debug("head "+string(o.Kind), attrs...)
	}
	if eh := w.cfg.ErrorHandler; eh != nil {
		switch {
		case o.Kind == OutcomeWriteFailed:
			eh(ctx, &o.Head, o.Err)
		case (o.Kind == OutcomeFailed || o.Kind == OutcomeDeadLettered) && o.Err != nil:
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
