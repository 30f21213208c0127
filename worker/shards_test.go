package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// A worker over an index of 256 shards, whose claims read 8 of them a call:
// work announced by another process is handled once each; work nobody
// announces (a writer with PublishWait < 0: new heads, and heads a dead
// process claimed whose leases lapse) is found by the MaxWait pass, which
// reads every shard. Counted: heads handled, handled twice, left over.
func TestWorkerOverManyShards(t *testing.T) {
	const shards = 256
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			client := tg.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			prefix := redistest.Prefix(t)
			store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ReadyShards: shards})
			require.NoError(t, err)
			loud, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ReadyShards: shards})
			require.NoError(t, err)
			silent, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, ReadyShards: shards, PublishWait: -1})
			require.NoError(t, err)

			var mu sync.Mutex
			runs := map[string]int{}
			attempts := map[string]int64{}
			e := &env{t: t, ctx: ctx, store: store, client: client, prefix: prefix}
			e.start(worker.Config{ID: "w", MaxWait: 500 * time.Millisecond, RepairEvery: time.Hour},
				worker.Handle("c", func(_ context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
					mu.Lock()
					defer mu.Unlock()
					runs[h.Session]++
					attempts[h.Session] = h.Attempts
					return nil, nil
				}))
			handled := func(n int) func() bool {
				return func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(runs) >= n
				}
			}
			one := []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}
			touched := map[int]bool{}
			const announced = 300
			for i := range announced {
				session := fmt.Sprintf("a%d", i)
				touched[keys.ReadyShard(session, shards)] = true
				_, err := loud.Append(ctx, session, one, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			e.eventually("announced work handled", handled(announced))

			const quiet, dead = 20, 20
			for i := range quiet {
				_, err := silent.Append(ctx, fmt.Sprintf("q%d", i), one, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			for i := range dead {
				session := fmt.Sprintf("d%d", i)
				_, err := silent.Append(ctx, session, one, redisstore.AppendOptions{})
				require.NoError(t, err)
				cl, err := silent.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "dead", TTL: 300 * time.Millisecond})
				require.NoError(t, err)
				// The worker may see the head first (its MaxWait pass).
				require.Contains(t, []redisstore.ClaimOutcome{redisstore.Claimed, redisstore.Busy}, cl.Outcome)
			}
			e.eventually("unannounced work and lapsed leases handled", handled(announced+quiet+dead))
			e.eventually("nothing left", e.idle)
			mu.Lock()
			defer mu.Unlock()
			twice, taken := 0, 0
			for session, n := range runs {
				if n > 1 {
					twice++
				}
				if session[0] == 'd' && attempts[session] == 2 {
					taken++
				}
			}
			t.Logf("%d heads handled over %d shards (%d touched by the announced ones), %d twice, %d lapsed leases taken over", len(runs), shards, len(touched), twice, taken)
			assert.Zero(t, twice, "heads handled twice")
			assert.Len(t, runs, announced+quiet+dead, "every head handled")
		})
	}
}

// An idle worker over 256 shards, once its start-up reads are done, sends
// nothing at all (a 2 s window, counted exactly by the server's command
// statistics): bounded reads per call do not turn into polling. A wake-up
// then costs one bounded read (claimNextShards ZRANGEs, not a pass over
// all 256), and the worker parks again. "Done" is the worker's own state
// (its first heartbeat and repair tried, every shard's subscription
// reported, the dispatcher parked with nothing pending), not a guess at how long start-up takes; MaxWait is an hour so
// that its pass cannot fall in the window.
func TestIdleWorkerOverManyShardsSendsNothing(t *testing.T) {
	const shards = 256
	addr, _ := redistest.Spawn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := redisstore.Dial(ctx, "redis://"+addr)
	require.NoError(t, err)
	defer client.Close()
	// The registry is read at New only (its refresh is its own test's).
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), ReadyShards: shards, ConsumerRefresh: -1})
	require.NoError(t, err)
	// Heartbeats and repairs at start only (their own tests count them).
	w, err := worker.New(store, worker.Config{Logger: quiet(), HeartbeatTTL: time.Hour, RepairEvery: time.Hour, MaxWait: time.Hour},
		worker.Handle("c", func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e := &env{t: t, ctx: ctx}
	e.eventually("start-up over and the dispatcher parked", func() bool { return worker.Parked(w) })
	counted := func() map[string]int64 {
		calls, err := redistest.CommandCalls(ctx, client)
		require.NoError(t, err)
		for _, name := range []string{"info", "config|resetstat", "config"} {
			delete(calls, name)
		}
		// rueidis's keep-alive on each subscribed connection.
		delete(calls, "ping")
		return calls
	}
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	time.Sleep(2 * time.Second)
	assert.Empty(t, counted(), "commands an idle worker sent in 2s")
	require.True(t, worker.Parked(w), "still parked")

	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	worker.Poke(w)
	e.eventually("parked again after a wake-up", func() bool { return worker.Parked(w) })
	calls := counted()
	t.Logf("one wake-up: %v", calls)
	assert.Equal(t, map[string]int64{"zrange": 8}, calls, "one wake-up reads 8 shards, once")
	require.NoError(t, w.Shutdown(ctx))
	require.NoError(t, <-done)
}
