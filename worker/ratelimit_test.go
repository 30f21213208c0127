package worker_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestRateLimitAcrossWorkers: three workers, each with its own client and
// store, handle a backlog of one rate-limited consumer beside an unlimited
// one. Over the run the limited consumer's handler starts stay at its
// limit: at most the limit in every window (windows on the server's
// clock, so counted here by the total over the run) and within 5% of it
// while the backlog lasts; no failure is counted; the unlimited consumer
// is not slowed; every head runs once.
func TestRateLimitAcrossWorkers(t *testing.T) {
	for _, target := range []string{"redis", "cluster"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			url := "redis://" + redistest.ServerAddr(t)
			if target == "cluster" {
				url = "redis://" + redistest.ClusterAddrs(t)[0]
			}
			prefix := redistest.Prefix(t)
			consumers := []a2redis.Consumer{{Name: "limited"}, {Name: "free"}}
			const (
				starts   = 25
				per      = 250 * time.Millisecond
				sessions = 20
				each     = 15 // heads per session: 300 in all, 3s at the limit
			)
			var mu sync.Mutex
			var limitedAt []time.Time
			runs := map[string]int{}
			freeDone := make(chan struct{})
			handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				mu.Lock()
				defer mu.Unlock()
				runs[h.Consumer+"/"+h.Session+"/"+h.ID]++
				if h.Consumer == "limited" {
					limitedAt = append(limitedAt, time.Now())
				} else {
					free := 0
					for k := range runs {
						if k[:5] == "free/" {
							free++
						}
					}
					if free == sessions*each {
						close(freeDone)
					}
				}
				return nil, nil
			}
			var stores []*redisstore.Store
			for i := 0; i < 3; i++ {
				client, err := redisstore.Dial(ctx, url)
				require.NoError(t, err)
				defer client.Close()
				s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: consumers})
				require.NoError(t, err)
				stores = append(stores, s)
			}
			for s := 0; s < sessions; s++ {
				batch := make([]a2redis.Event, each)
				for i := range batch {
					batch[i] = a2redis.Event{Type: "x", Targets: []a2redis.Target{{Consumer: "limited"}, {Consumer: "free"}}}
				}
				_, err := stores[0].Append(ctx, "s"+string(rune('a'+s)), batch, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			var workers []*worker.Worker
			done := make(chan error, 3)
			for i, s := range stores {
				w, err := worker.New(s, worker.Config{ID: "w" + string(rune('0'+i)), Concurrency: 16, Logger: quiet(), RepairEvery: -1},
					worker.Handle("limited", handler, worker.RateLimit(starts, per)),
					worker.Handle("free", handler))
				require.NoError(t, err)
				workers = append(workers, w)
				go func() { done <- w.Run(ctx) }()
			}
			select {
			case <-freeDone:
			case <-ctx.Done():
				t.Fatal("the unlimited consumer's heads did not all run")
			}
			deadline := time.Now().Add(time.Minute)
			for {
				mu.Lock()
				n := len(limitedAt)
				mu.Unlock()
				if n >= sessions*each || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, w := range workers {
				stopCtx, c := context.WithTimeout(context.Background(), time.Minute)
				require.NoError(t, w.Shutdown(stopCtx))
				c()
			}
			for range workers {
				require.NoError(t, <-done)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, limitedAt, sessions*each, "every limited head ran")
			for k, n := range runs {
				require.Equal(t, 1, n, "%s ran once", k)
			}
			sort.Slice(limitedAt, func(i, j int) bool { return limitedAt[i].Before(limitedAt[j]) })
			span := limitedAt[len(limitedAt)-1].Sub(limitedAt[0])
			// n starts at the limit touch n/starts windows, the first and
			// the last perhaps barely: their span is at least n/starts-2
			// windows (the handlers' clock is not the server's, whose
			// windows count), and about n/starts at the limit.
			windows := float64(span) / float64(per)
			rate := float64(len(limitedAt)) / (windows + 1) // per window, the last one partial
			t.Logf("%d limited starts over %v (%.1f windows): %.1f per window (limit %d): %.3f of the limit",
				len(limitedAt), span.Round(time.Millisecond), windows, rate, starts, rate/starts)
			minWindows := float64(len(limitedAt))/starts - 2
			require.GreaterOrEqual(t, windows, minWindows, "never faster than the limit")
			// How close to the limit the workers run is a matter of the
			// machine's speed: a stall anywhere stretches the span. It is
			// measured by TestRateLimitOverAMinute (make chaos), not
			// asserted here.
			for i := 0; i < sessions; i++ {
				cursors, err := stores[0].Cursors(ctx, "s"+string(rune('a'+i)))
				require.NoError(t, err)
				for _, c := range cursors {
					require.Zero(t, c.Failures)
				}
			}
		})
	}
}
