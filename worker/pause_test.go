package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestPauseAndResumeAConsumer: while its consumer is paused a worker runs
// none of its heads and counts no failure; the resume's announcement wakes
// the idle worker (MaxWait is a minute, so only the wake-up can explain a
// prompt run).
func TestPauseAndResumeAConsumer(t *testing.T) {
	each(t, []a2redis.Consumer{{Name: "mailer"}}, func(t *testing.T, e *env) {
		var runs atomic.Int64
		handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			runs.Add(1)
			return nil, nil
		}
		require.NoError(t, e.store.PauseConsumer(e.ctx, "mailer"))
		r := e.start(worker.Config{ID: "w", MaxWait: time.Minute, RepairEvery: -1}, worker.Handle("mailer", handler))
		for i := 0; i < 5; i++ {
			_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Targets: []a2redis.Target{{Consumer: "mailer"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		time.Sleep(300 * time.Millisecond)
		require.Zero(t, runs.Load(), "a paused consumer's heads wait")
		start := time.Now()
		require.NoError(t, e.store.ResumeConsumer(e.ctx, "mailer"))
		e.eventually("the heads run after the resume", func() bool { return runs.Load() == 5 })
		t.Logf("handled 5 heads %v after the resume", time.Since(start).Round(time.Millisecond))
		require.Less(t, time.Since(start), 30*time.Second, "woken by the resume, not MaxWait")
		require.NoError(t, r.stop())
		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		for _, c := range cursors {
			require.Zero(t, c.Failures)
		}
	})
}
