package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestPerSessionConcurrency: a consumer registered with PerSession 1 runs
// one head of a session at a time across three workers (each with its own
// store), while the sessions run side by side; every head runs once, no
// failure is counted, and nothing is left in flight. The handler counts
// the runs of each session that overlap. The first handlers hold until two
// run at once (of two sessions: the limit lets no other through), so the
// sessions are shown side by side however fast the machine runs them.
func TestPerSessionConcurrency(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "c", PerSession: 1}}, func(t *testing.T, e *env) {
		const sessions, perSession = 12, 8
		var mu sync.Mutex
		active, peak, runs := map[string]int{}, map[string]int{}, map[string]int{}
		overlapping, maxActive, total := 0, 0, 0
		sideBySide := make(chan struct{})
		handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			mu.Lock()
			active[h.Session]++
			total++
			if active[h.Session] > 1 {
				overlapping++
			}
			peak[h.Session] = max(peak[h.Session], active[h.Session])
			runs[fmt.Sprintf("%s/%d", h.Session, h.Index)]++
			n := 0
			for _, a := range active {
				n += a
			}
			if n == 2 && maxActive < 2 {
				close(sideBySide)
			}
			maxActive = max(maxActive, n)
			mu.Unlock()
			select {
			case <-sideBySide:
			case <-ctx.Done():
				mu.Lock()
				active[h.Session]--
				mu.Unlock()
				return nil, ctx.Err()
			}
			time.Sleep(3 * time.Millisecond)
			mu.Lock()
			active[h.Session]--
			mu.Unlock()
			return nil, nil
		}
		start := time.Now()
		var workers []*running
		for i := range 3 {
			store, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, Clock: e.clock.Now})
			require.NoError(t, err)
			we := *e
			we.store = store
			workers = append(workers, we.start(worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 8, MaxWait: 200 * time.Millisecond, RepairEvery: -1},
				worker.Handle("c", handler)))
		}
		for s := range sessions {
			events := make([]a2redis.Event, perSession)
			for i := range events {
				events[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
			}
			_, err := e.store.Append(e.ctx, fmt.Sprintf("s%d", s), events, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		e.eventually("every head runs", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return total >= sessions*perSession
		})
		elapsed := time.Since(start)
		for _, w := range workers {
			require.NoError(t, w.stop())
		}
		mu.Lock()
		defer mu.Unlock()
		require.Zero(t, overlapping, "no two heads of one session ran at once (peaks %v)", peak)
		require.Len(t, runs, sessions*perSession)
		for head, n := range runs {
			require.Equal(t, 1, n, "head %s ran once", head)
		}
		require.Greater(t, maxActive, 1, "sessions ran side by side")
		for s := range sessions {
			session := fmt.Sprintf("s%d", s)
			inFlight, err := e.store.InFlight(e.ctx, session)
			require.NoError(t, err)
			require.Empty(t, inFlight)
			cursors, err := e.store.Cursors(e.ctx, session)
			require.NoError(t, err)
			for _, c := range cursors {
				require.Zero(t, c.Failures)
			}
		}
		t.Logf("%d heads of %d sessions in %v, at most %d at once", total, sessions, elapsed.Round(time.Millisecond), maxActive)
	})
}
