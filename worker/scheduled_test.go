package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestScheduledEventsWakeTheWorker: events appended with NotBefore = now +
// 1 s, one every 50 ms, each in a session of its own, through a running
// worker already idle whose MaxWait is an hour: no handler starts before
// its event's time, every one runs (the shard announces each new time, the
// worker waits for the index's next time; it does not poll, and its MaxWait
// pass cannot explain a start), none counts a failure. It logs the delay of
// each handler start past its time (p50, p99, max): the wake-up latency.
func TestScheduledEventsWakeTheWorker(t *testing.T) {
	const n = 40
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tg.Client(t), []a2redis.Consumer{mailer}, true)
			var mu sync.Mutex
			started, attempts := map[string]time.Time{}, map[string]int64{}
			handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := started[h.Session]; !ok {
					started[h.Session] = time.Now()
				}
				attempts[h.Session] = max(attempts[h.Session], h.Attempts+h.Failures)
				return nil, nil
			}
			r := e.start(worker.Config{ID: "w", MaxWait: time.Hour, RepairEvery: -1}, worker.Handle("mailer", handler))
			// Let it find nothing and go idle: only an announcement wakes it.
			time.Sleep(300 * time.Millisecond)
			due := map[string]time.Time{}
			for i := range n {
				session := fmt.Sprintf("s%d", i)
				at := time.Now().Add(time.Second)
				res, err := e.store.Append(e.ctx, session, []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "mailer"}}, NotBefore: at}}, redisstore.AppendOptions{})
				require.NoError(t, err)
				due[session] = res.Events[0].NotBefore
				time.Sleep(50 * time.Millisecond)
			}
			e.eventually("every scheduled head ran", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(started) == n
			})
			require.NoError(t, r.stop())
			mu.Lock()
			defer mu.Unlock()
			delays := make([]time.Duration, 0, n)
			for session, at := range due {
				delay := started[session].Sub(at)
				require.GreaterOrEqual(t, delay, time.Duration(0), "session %s ran %v before its time", session, -delay)
				delays = append(delays, delay)
				require.Equal(t, int64(1), attempts[session], "session %s: one attempt, no failure", session)
			}
			slices.Sort(delays)
			t.Logf("%s: handler start past NotBefore over %d events: p50 %v, p99 %v, max %v", tg.Name, n,
				delays[n/2].Round(time.Millisecond), delays[(n*99+99)/100-1].Round(time.Millisecond), delays[n-1].Round(time.Millisecond))
		})
	}
}
