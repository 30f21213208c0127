package worker_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// idleSetup starts a private redis-server (its command counts are this
// test's alone) holding `sessions` idle sessions — appended to with no
// work, or (finished) with one event for mailer, which the worker will
// handle — and a store on it.
func idleSetup(tb testing.TB, sessions int, finished bool) (*redisstore.Store, rueidis.Client) {
	tb.Helper()
	addr, _ := redistest.Spawn(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	client, err := redisstore.Dial(ctx, "redis://"+addr)
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(tb), Consumers: everyone})
	require.NoError(tb, err)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < sessions; i += 16 {
				ev := a2redis.Event{Type: "note"}
				if finished {
					ev.Targets = []a2redis.Target{{Consumer: "mailer"}}
				}
				_, err := store.Append(ctx, fmt.Sprintf("idle-%d", i), []a2redis.Event{ev}, redisstore.AppendOptions{})
				require.NoError(tb, err)
			}
		})
	}
	wg.Wait()
	return store, client
}

// idleWindow runs a started worker for d and returns the commands the
// server ran meanwhile (INFO and CONFIG, the measurement's own, left out)
// and the CPU time this process used.
func idleWindow(tb testing.TB, client rueidis.Client, d time.Duration) (map[string]int64, time.Duration) {
	tb.Helper()
	ctx := context.Background()
	require.NoError(tb, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	before := cpuTime(tb)
	time.Sleep(d)
	used := cpuTime(tb) - before
	calls, err := redistest.CommandCalls(ctx, client)
	require.NoError(tb, err)
	delete(calls, "info")
	delete(calls, "config|resetstat")
	delete(calls, "config")
	return calls, used
}

func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startIdle runs a worker with cfg (quiet) on store and returns once its
// start-up is over and its dispatcher parked (worker.Parked).
func startIdle(tb testing.TB, store *redisstore.Store, cfg worker.Config) func() {
	tb.Helper()
	cfg.Logger = quiet()
	w, err := worker.New(store, cfg,
		worker.Handle("mailer", noopHandler), worker.Handle("billing", noopHandler), worker.Handle("auditor", noopHandler))
	require.NoError(tb, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	deadline := time.Now().Add(time.Minute)
	for !worker.Parked(w) {
		require.True(tb, time.Now().Before(deadline), "the worker's start-up did not end within a minute")
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		require.NoError(tb, w.Shutdown(context.Background()))
		require.NoError(tb, <-done)
	}
}

func noopHandler(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }

// An idle worker never polls: over sessions with no work, once its
// start-up is over (worker.Parked), it sends nothing — no claim, no script,
// no index read — counted exactly by the server's command statistics over
// 2 s. MaxWait, heartbeats and repairs are an hour away, so that none falls
// in the window (their own tests count them; BenchmarkIdleWorker measures
// the defaults). The PINGs are rueidis's keep-alive: one per idle pooled
// connection every Dialer.KeepAlive, 1s by default, whatever uses the
// client.
func TestIdleWorkerSendsNothing(t *testing.T) {
	store, client := idleSetup(t, 1000, false)
	stop := startIdle(t, store, worker.Config{MaxWait: time.Hour, HeartbeatTTL: time.Hour, RepairEvery: time.Hour})
	defer stop()
	calls, _ := idleWindow(t, client, 2*time.Second)
	t.Logf("in 2s: %v", calls)
	delete(calls, "ping")
	require.Empty(t, calls, "commands an idle worker sent in 2s")
}

// BenchmarkIdleWorker measures an idle worker watching 10,000 idle
// sessions over 10 s windows: the commands per second it makes the server
// run, this process's CPU use, and what one ready-index repair pass (run
// by one worker per prefix every RepairEvery) costs. "never-worked":
// sessions that never had work; "finished": sessions whose work the
// worker has done (each keeps its ready-index record, which a repair pass
// reads).
//
//	go test ./worker -run '^$' -bench IdleWorker -benchtime 1x
func BenchmarkIdleWorker(b *testing.B) {
	b.Run("never-worked", func(b *testing.B) { benchmarkIdle(b, false) })
	b.Run("finished", func(b *testing.B) { benchmarkIdle(b, true) })
}

func benchmarkIdle(b *testing.B, finished bool) {
	const sessions = 10_000
	store, client := idleSetup(b, sessions, finished)
	stop := startIdle(b, store, worker.Config{})
	defer stop()
	for finished {
		stats, err := store.ReadyStats(context.Background())
		require.NoError(b, err)
		left := int64(0)
		for _, st := range stats {
			left += st.Due + st.Held
		}
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	const window = 10 * time.Second
	var total, pings int64
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		calls, used := idleWindow(b, client, window)
		for name, n := range calls {
			total += n
			if name == "ping" {
				pings += n
			}
		}
		cpu += used
		b.Logf("commands in %v: %v; CPU %v", window, calls, used)
	}
	b.StopTimer()
	seconds := (window * time.Duration(b.N)).Seconds()
	b.ReportMetric(float64(total)/seconds, "cmds/s")
	b.ReportMetric(float64(total-pings)/seconds, "non-ping-cmds/s")
	b.ReportMetric(100*cpu.Seconds()/seconds, "%cpu")

	ctx := context.Background()
	require.NoError(b, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	st, err := store.RepairReady(ctx)
	require.NoError(b, err)
	calls, err := redistest.CommandCalls(ctx, client)
	require.NoError(b, err)
	delete(calls, "info")
	delete(calls, "config|resetstat")
	var pass int64
	for _, n := range calls {
		pass += n
	}
	b.Logf("one repair pass over %d sessions: %v (%+v)", sessions, calls, st)
	b.ReportMetric(float64(pass), "cmds/repair")
}
