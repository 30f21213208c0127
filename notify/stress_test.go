package notify_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// A feed receives 10,000 events appended by 8 concurrent writers in batches
// of mixed sizes (some over 32 KiB, announced bare) and delivers each exactly
// once, in order — also while its connection is killed several times: at
// chosen points of the stream (each 2,000th event taken), not on a timer.
func TestFeedTenThousandEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	run := func(t *testing.T, e *env, kill func()) {
		const total, writers = 10_000, 8
		c := follow(t, e, "s", 0)
		waitReads(t, e, 1)
		big := json.RawMessage(`"` + strings.Repeat("x", 3000) + `"`)
		var mu sync.Mutex
		remaining := total
		// take reserves up to size events; the writer whose reservation
		// crosses a multiple of 2,000 (short of the total) kills first. At
		// most one batch (40 events) per writer is in flight, so each of the
		// 4 kills has 1,600 events appended before it and 1,900 after it.
		take := func(size int) (n int, killFirst bool) {
			mu.Lock()
			defer mu.Unlock()
			taken := total - remaining
			n = min(size, remaining)
			remaining -= n
			return n, (taken+n)/2000 > taken/2000 && taken+n < total
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := 0; ; b++ {
					size, killFirst := take([]int{1, 7, 40, 3, 15}[(b+w)%5])
					if size == 0 {
						return
					}
					if killFirst && kill != nil {
						kill()
					}
					batch := make([]a2redis.Event, size)
					for i := range batch {
						batch[i] = a2redis.Event{ID: fmt.Sprintf("w%d-%d-%d", w, b, i), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d}`, w))}
						if size == 15 {
							batch[i].Payload = big // 15 × 3 KB: over 32 KiB, a bare wake-up
						}
					}
					appendRetrying(t, e, batch)
				}
			}()
		}
		wg.Wait()
		requireRun(t, c.waitFor(t, total), 1, total)
	}
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		run(t, newEnv(t, redistest.Server(t), false), nil)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		run(t, newEnv(t, redistest.Cluster(t), false), nil)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, client := redistest.Miniredis(t)
		run(t, newEnv(t, client, false), nil)
	})
	t.Run("redis-killed", func(t *testing.T) {
		t.Parallel()
		srv := redistest.SpawnServer(t)
		client := privateClient(t, srv.Addr())
		e := newEnv(t, client, false)
		var kills, killed atomic.Int64
		run(t, e, func() {
			kills.Add(1)
			n, err := client.Do(e.ctx, client.B().ClientKill().TypePubsub().Build()).AsInt64()
			if err == nil {
				killed.Add(n)
			}
		})
		// The feed subscribed before its first read (waitReads), so the
		// first kill finds its connection.
		if kills.Load() != 4 || killed.Load() == 0 {
			t.Errorf("%d kills, %d subscriber connections killed: want 4 kills, one connection at least", kills.Load(), killed.Load())
		}
		t.Logf("killed %d subscriber connections mid-stream", killed.Load())
	})
}

func appendRetrying(t *testing.T, e *env, batch []a2redis.Event) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("append: %v", err)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
