package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestRetentionByTheWorker: two workers with Config.Retention end the
// sessions idle for an hour, one pass per interval between them
// (Hooks.OnRetention counts the passes), and leave the session with work.
func TestRetentionByTheWorker(t *testing.T) {
	each(t, nil, func(t *testing.T, e *env) {
		for _, s := range []string{"a", "b", "c"} {
			_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		e.clock.Advance(2 * time.Hour)
		_, err := e.store.Append(e.ctx, "busy", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "nobody-runs"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		var mu sync.Mutex
		ended, passes, scanned := 0, 0, 0
		// The whole shared keyspace in one pass, in big SCAN steps: the
		// package's shared server holds every other test's keys, and under
		// the race detector on a loaded machine a pass of 500-key steps
		// outlasted the test's wait.
		cfg := worker.Config{RepairEvery: -1, RetentionEvery: 200 * time.Millisecond,
			Retention: &redisstore.RetentionPolicy{IdleFor: time.Hour, MaxScan: 1 << 30, ScanPage: 20_000},
			Hooks: worker.Hooks{OnRetention: func(_ context.Context, r redisstore.RetentionResult) {
				mu.Lock()
				defer mu.Unlock()
				ended += r.Ended
				scanned += r.Scanned
				passes++
			}}}
		noop := func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }
		// Every pass takes the lock for the interval, so the passes are at
		// least an interval apart: measured from before the first worker
		// starts, the bound below holds however slowly the machine starts
		// the second.
		start := time.Now()
		cfg.ID = "w1"
		w1 := e.start(cfg, worker.Handle("c", noop))
		cfg.ID = "w2"
		w2 := e.start(cfg, worker.Handle("c", noop))
		for deadline := time.Now().Add(eventuallyWait); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			// At least 3: two passes can overlap when one outlasts the
			// lock's interval (seen under -race), and both then report the
			// session whose clear they raced for (the clear is conditional:
			// it happens once; the bounds below say so).
			done, p, n, sc := ended >= 3, passes, ended, scanned
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				keys, _ := e.client.Do(e.ctx, e.client.B().Dbsize().Build()).AsInt64()
				t.Fatalf("timed out waiting for the idle sessions to end: %d passes in %v ended %d, scanned %d sessions of the prefix; the server holds %d keys",
					p, time.Since(start).Round(time.Millisecond), n, sc, keys)
			}
		}
		// More passes meanwhile (how many depends on the machine; the bound
		// holds for any number).
		time.Sleep(450 * time.Millisecond)
		require.NoError(t, w1.stop())
		require.NoError(t, w2.stop())
		for _, s := range []string{"a", "b", "c"} {
			b, err := e.store.Bounds(e.ctx, s)
			require.NoError(t, err)
			require.Equal(t, redisstore.Bounds{Head: 2, ClearIndex: 2}, b, "%s ended", s)
		}
		b, err := e.store.Bounds(e.ctx, "busy")
		require.NoError(t, err)
		require.Zero(t, b.ClearIndex, "a session with work stays")
		mu.Lock()
		defer mu.Unlock()
		intervals := int(time.Since(start)/(200*time.Millisecond)) + 2
		require.LessOrEqual(t, passes, intervals, "one pass per interval between both workers")
	})
}
