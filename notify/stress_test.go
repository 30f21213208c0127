package notify_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// A feed receives 10,000 events appended by 8 concurrent writers in batches
// of mixed sizes (some over 32 KiB, announced bare) and delivers each exactly
// once, in order — also while its connection is killed several times.
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
		take := func(size int) int {
			mu.Lock()
			defer mu.Unlock()
			n := min(size, remaining)
			remaining -= n
			return n
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := 0; ; b++ {
					size := take([]int{1, 7, 40, 3, 15}[(b+w)%5])
					if size == 0 {
						return
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
		if kill != nil {
			for range 4 {
				time.Sleep(40 * time.Millisecond)
				kill()
			}
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
		var killed int64
		run(t, e, func() {
			n, err := client.Do(e.ctx, client.B().ClientKill().TypePubsub().Build()).AsInt64()
			if err == nil {
				killed += n
			}
		})
		if killed == 0 {
			t.Error("no subscriber connection was killed")
		}
		t.Logf("killed %d subscriber connections mid-stream", killed)
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
