package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// renewParallel bounds the RenewClaims calls of one round in flight at once.
const renewParallel = 16

// renewLoop renews the held claims every RenewEvery until ctx ends.
func (w *Worker) renewLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if gate := w.renewGate.Load(); gate != nil {
			(*gate)()
		}
		w.renew(ctx)
	}
}

// renew renews, one RenewClaims call per session, every held claim whose
// lease would end before the next round could renew it with a margin (a
// claim younger than half a round is left for the next), and cancels the
// handlers of claims that are lost: reported superseded or lapsed, or
// past their lease by this process's clock (a renewal that kept failing).
func (w *Worker) renew(ctx context.Context) {
	now := time.Now()
	due := now.Add(w.cfg.TTL - w.cfg.RenewEvery/2)
	groups := map[string][]*job{}
	var expired []*job
	w.mu.Lock()
	for _, j := range w.held {
		switch {
		case j.lost:
		case !j.leaseUntil.After(now):
			if j.state != jobSettling {
				w.loseLocked(j)
				expired = append(expired, j)
			}
		case j.leaseUntil.Before(due):
			groups[j.session] = append(groups[j.session], j)
		}
	}
	w.mu.Unlock()
	for _, j := range expired {
		w.log.Warn("lease ran out before it could be renewed: cancelling the handler", "worker", w.cfg.ID,
			"consumer", j.head.Consumer, "session", j.session, "index", j.head.Index, "attempt", j.head.Attempts)
	}
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for session, jobs := range groups {
		for chunk := range slices.Chunk(jobs, w.cfg.CompleteBatch) {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				w.renewSession(ctx, session, chunk)
			})
		}
	}
	wg.Wait()
}

func (w *Worker) renewSession(ctx context.Context, session string, jobs []*job) {
	claims := make([]redisstore.Attempt, len(jobs))
	byRef := make(map[a2redis.HeadRef]*job, len(jobs))
	for i, j := range jobs {
		claims[i] = redisstore.AttemptOf(j.head)
		byRef[j.head.Ref()] = j
	}
	sent := time.Now()
	res, err := w.store.RenewClaims(ctx, redisstore.RenewRequest{Session: session, Holder: w.cfg.ID, Claims: claims, TTL: w.cfg.TTL})
	if err != nil {
		if ctx.Err() == nil {
			w.runtimeError(ctx, nil, fmt.Errorf("worker: renewing %d claims in session %q: %w", len(claims), session, err))
		}
		return
	}
	var lost []*job
	w.mu.Lock()
	for _, ref := range res.Renewed {
		if j := byRef[ref]; j != nil && !j.lost {
			j.leaseUntil = sent.Add(w.cfg.TTL)
		}
	}
	for _, refs := range [][]a2redis.HeadRef{res.Superseded, res.Lapsed} {
		for _, ref := range refs {
			// A settling job's claim may be gone because its own outcome
			// was just recorded: its write tells.
			if j := byRef[ref]; j != nil && !j.lost && j.state != jobSettling {
				w.loseLocked(j)
				lost = append(lost, j)
			}
		}
	}
	w.mu.Unlock()
	for _, j := range lost {
		w.log.Warn("claim lost: cancelling the handler", "worker", w.cfg.ID,
			"consumer", j.head.Consumer, "session", j.session, "index", j.head.Index, "attempt", j.head.Attempts)
	}
}
