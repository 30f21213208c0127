package notify_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// BenchmarkFeedLatency appends one event every 2 ms (500 events/s) and
// measures the time from Append returning (p50-ms, p99-ms; 0 when the
// wake-up beat the append's own reply) and from Append being called
// (call-p50-ms, call-p99-ms) to the event reaching a caught-up Follow, plus the catch-up reads the feed needed per delivered event (0:
// every wake-up carried its event).
//
//	go test ./notify -run '^$' -bench FeedLatency -benchtime 2000x
func BenchmarkFeedLatency(b *testing.B) {
	e := newEnv(b, redistest.Server(b), false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	appended := map[int64]time.Time{}
	called := map[int64]time.Time{}
	delivered := map[int64]time.Time{}
	done := make(chan struct{})
	go func() {
		_ = e.feed.Follow(ctx, "lat", 0, func(u notify.Update) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range u.Events {
				delivered[ev.Index] = now
			}
			if len(delivered) == b.N {
				close(done)
			}
			return nil
		})
	}()
	for e.src.done.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	readsBefore := e.src.reads.Load()
	b.ResetTimer()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < b.N; i++ {
		<-tick.C
		start := time.Now()
		res, err := e.store.Append(ctx, "lat", []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`)}}, redisstore.AppendOptions{})
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		appended[res.Events[0].Index] = time.Now()
		called[res.Events[0].Index] = start
		mu.Unlock()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.Fatal("the feed did not deliver every event")
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	fromReturn := make([]time.Duration, 0, b.N)
	fromCall := make([]time.Duration, 0, b.N)
	for index, at := range appended {
		// A wake-up may arrive before the append's own PUBLISH returned.
		fromReturn = append(fromReturn, max(delivered[index].Sub(at), 0))
		fromCall = append(fromCall, delivered[index].Sub(called[index]))
	}
	pct := func(d []time.Duration, p float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(fromReturn, 0.50), "p50-ms")
	b.ReportMetric(pct(fromReturn, 0.99), "p99-ms")
	b.ReportMetric(pct(fromCall, 0.50), "call-p50-ms")
	b.ReportMetric(pct(fromCall, 0.99), "call-p99-ms")
	b.ReportMetric(float64(e.src.reads.Load()-readsBefore)/float64(b.N), "reads/event")
}
