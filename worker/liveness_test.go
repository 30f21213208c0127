package worker_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// liveWorkers lists the prefix's live workers by the store's clock.
func (e *env) liveWorkers() map[string]redisstore.WorkerInfo {
	e.t.Helper()
	out := map[string]redisstore.WorkerInfo{}
	req := redisstore.PageRequest{}
	for {
		page, err := e.store.Workers(e.ctx, req)
		require.NoError(e.t, err)
		for _, w := range page.Workers {
			out[w.ID] = w
		}
		if page.Next == "" {
			return out
		}
		req.After = page.Next
	}
}

// A running worker registers itself with what it holds, refreshes its
// record while it runs, and deregisters when it stops.
func TestWorkerRegistersAndHeartbeats(t *testing.T) {
	each(t, nil, func(t *testing.T, e *env) {
		gate := make(chan struct{})
		const ttl = 300 * time.Millisecond
		r := e.start(worker.Config{ID: "w-live", Host: "test-host", Concurrency: 4, HeartbeatTTL: ttl},
			worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				<-gate
				return nil, nil
			}))
		for i := range 3 {
			e.append(fmt.Sprintf("s%d", i), a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "mailer"}}})
		}
		var info redisstore.WorkerInfo
		e.eventually("the worker lists its three running heads", func() bool {
			info = e.liveWorkers()["w-live"]
			return info.InFlight == 3 && info.HeadsTotal == 3
		})
		require.Equal(t, "test-host", info.Host)
		require.Equal(t, os.Getpid(), info.PID)
		require.Equal(t, []string{"mailer"}, info.Consumers)
		require.Equal(t, 4, info.Concurrency)
		require.False(t, info.StartedAt.IsZero())
		var sessions []string
		for _, h := range info.Heads {
			require.Equal(t, "mailer", h.Consumer)
			require.Equal(t, int64(1), h.Index)
			sessions = append(sessions, h.Session)
		}
		sort.Strings(sessions)
		require.Equal(t, []string{"s0", "s1", "s2"}, sessions)
		require.Equal(t, info.HeartbeatAt.Add(ttl), info.ExpiresAt)

		// Past the TTL by the store's clock, only a new heartbeat lists it.
		e.clock.Advance(time.Second)
		e.eventually("a heartbeat refreshes the record", func() bool {
			got, ok := e.liveWorkers()["w-live"]
			return ok && got.HeartbeatAt.UnixMilli() == e.clock.Now().UnixMilli()
		})

		close(gate)
		e.eventually("the record shows nothing held", func() bool {
			got := e.liveWorkers()["w-live"]
			return got.HeadsTotal == 0 && got.InFlight == 0 && len(got.Heads) == 0 && got.ID == "w-live"
		})
		require.NoError(t, r.stop())
		require.Empty(t, e.liveWorkers(), "a clean stop deregisters")
	})
}

// A worker whose heartbeats stop (a killed process: it never deregisters)
// disappears once its TTL passes, while a live one stays.
func TestDeadWorkerDisappears(t *testing.T) {
	each(t, nil, func(t *testing.T, e *env) {
		const ttl = 300 * time.Millisecond
		noop := worker.Handle("mailer", func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil })
		w, err := worker.New(e.store, worker.Config{ID: "w-dying", HeartbeatTTL: ttl, Logger: quiet()}, noop)
		require.NoError(t, err)
		var alive, skipped atomic.Bool
		alive.Store(true)
		worker.SetBeatGate(w, func() bool {
			if !alive.Load() {
				skipped.Store(true)
				return false
			}
			return true
		})
		done := make(chan error, 1)
		go func() { done <- w.Run(e.ctx) }()
		t.Cleanup(func() { _ = w.Shutdown(context.Background()); <-done })
		e.start(worker.Config{ID: "w-alive", HeartbeatTTL: ttl}, noop)

		e.eventually("both workers listed", func() bool { return len(e.liveWorkers()) == 2 })
		alive.Store(false)
		// Beats are sequential: once one is skipped, the last one landed.
		e.eventually("a heartbeat skipped", skipped.Load)
		e.clock.Advance(ttl + time.Millisecond)
		e.eventually("only the live worker listed", func() bool {
			ws := e.liveWorkers()
			_, ok := ws["w-alive"]
			return ok && len(ws) == 1
		})
		time.Sleep(ttl) // more than a heartbeat period: the dead one stays gone
		_, ok := e.liveWorkers()["w-dying"]
		require.False(t, ok, "a worker that stopped heartbeating stays gone")
	})
}
