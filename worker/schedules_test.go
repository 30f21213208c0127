package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
	"github.com/a2redis/a2redis/worker"
)

// TestWorkerRunsSchedules: Config.Schedules run while the worker runs, and
// two workers running one schedule append each tick once; the ticks reach
// the schedule's target consumer.
func TestWorkerRunsSchedules(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "reporter"}}, func(t *testing.T, e *env) {
		var mu sync.Mutex
		seen := map[string]int{}
		handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			mu.Lock()
			seen[h.ID]++
			mu.Unlock()
			return nil, nil
		}
		sched := schedule.Schedule{Name: "beat", Every: 25 * time.Millisecond, Session: "reports",
			Event: a2redis.Event{Type: "report.due", Targets: []a2redis.Target{{Consumer: "reporter"}}}}
		a := e.start(worker.Config{ID: "a", Schedules: []schedule.Schedule{sched}}, worker.Handle("reporter", handler))
		b := e.start(worker.Config{ID: "b", Schedules: []schedule.Schedule{sched}}, worker.Handle("reporter", handler))
		e.eventually("ten ticks handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= 10
		})
		require.NoError(t, a.stop())
		require.NoError(t, b.stop())
		events, err := e.store.Read(e.ctx, "reports", 0, 1_000_000)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for i, ev := range events {
			require.Equal(t, "report.due", ev.Type)
			if i > 0 {
				require.NotEqual(t, events[i-1].ID, ev.ID)
			}
			require.LessOrEqual(t, seen[ev.ID], 1, "%s handled once", ev.ID)
		}
		require.Len(t, listed(t, e), 1)
	})
}

func listed(t *testing.T, e *env) []string {
	t.Helper()
	list, err := e.store.Schedules(e.ctx)
	require.NoError(t, err)
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	return names
}

// TestWorkerIgnoresConsumersAddedLater: a worker handling every registered
// consumer does not claim the heads of a consumer registered after it
// started (it has no handler for it): they wait for a worker that has.
func TestWorkerIgnoresConsumersAddedLater(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "mailer"}}, func(t *testing.T, e *env) {
		var mu sync.Mutex
		handled := map[string]int{}
		handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			mu.Lock()
			handled[h.Consumer]++
			mu.Unlock()
			return nil, nil
		}
		r := e.start(worker.Config{ID: "w1"}, worker.Handle("mailer", handler))
		require.NoError(t, e.store.AddConsumers(e.ctx, a2redis.Consumer{Name: "billing"}))
		for i := 0; i < 5; i++ {
			_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		e.eventually("mailer's heads handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return handled["mailer"] == 5
		})
		require.NoError(t, r.stop())
		mu.Lock()
		require.Zero(t, handled["billing"], "no head of a consumer the worker has no handler for")
		mu.Unlock()
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Empty(t, dead)
		r2 := e.start(worker.Config{ID: "w2"}, worker.Handle("billing", handler))
		e.eventually("billing's heads handled by a worker that has its handler", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return handled["billing"] == 5
		})
		require.NoError(t, r2.stop())
	})
}
