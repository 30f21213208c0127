package redisstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Sixteen holders race ClaimAvailable/CompleteAttempt over one session with
// 2,000 events across event, lane and log consumers: every (consumer, event)
// is handled exactly once, lane order holds, and no head is lost.
func TestHoldersRace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, tg := range redistest.Targets {
		if tg.Name == "miniredis" {
			continue // too slow for 2,000 events × 3 consumers; covered by the smaller tests
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tg)
			const n, lanes, holders = 2000, 8, 16
			served := []a2redis.Consumer{{Name: "ev"}, {Name: "ln"}, {Name: "lg", Log: &a2redis.LogSpec{Lane: "all", Types: []string{"odd"}}}}
			for start := 0; start < n; start += 250 {
				batch := make([]a2redis.Event, 250)
				for i := range batch {
					idx := start + i + 1
					typ := "even"
					if idx%2 == 1 {
						typ = "odd"
					}
					batch[i] = a2redis.Event{Type: typ, Targets: []a2redis.Target{{Consumer: "ev"}, {Consumer: "ln", Lane: fmt.Sprint(idx % lanes)}}}
				}
				_, err := e.store.Append(e.ctx, "race", batch, redisstore.AppendOptions{Consumers: served})
				require.NoError(t, err)
			}

			var mu sync.Mutex
			handled := map[string]int{}
			laneLast := map[string]int64{}
			var wg sync.WaitGroup
			errs := make(chan error, holders)
			for w := range holders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					holder := fmt.Sprint("w", w)
					for {
						c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "race", Holder: holder, TTL: time.Minute, Consumers: served, Limit: 8})
						if err != nil {
							errs <- err
							return
						}
						if c.Outcome == redisstore.Settled {
							return
						}
						if c.Outcome == redisstore.Busy {
							time.Sleep(time.Millisecond)
							continue
						}
						for _, h := range c.Heads {
							// Recorded before completing: a lane's next head is
							// claimable only once this one completed.
							mu.Lock()
							handled[fmt.Sprintf("%s@%d", h.Consumer, h.Index)]++
							if h.Kind != a2redis.EventCursor {
								key := h.Consumer + "/" + h.Lane
								if h.Index <= laneLast[key] {
									errs <- fmt.Errorf("%s ran %d after %d", key, h.Index, laneLast[key])
								}
								laneLast[key] = h.Index
							}
							mu.Unlock()
							r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "race", Head: h.Ref(), Attempt: h.Attempts, Consumers: served})
							if err != nil {
								errs <- err
								return
							}
							if r.Outcome != redisstore.Completed {
								errs <- fmt.Errorf("%v superseded", h.Ref())
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			want := n + n + n/2
			assert.Len(t, handled, want)
			for k, count := range handled {
				assert.Equal(t, 1, count, k)
			}
			dead, err := e.store.DeadLetters(e.ctx, "race")
			require.NoError(t, err)
			assert.Empty(t, dead)
			res, err := e.store.Append(e.ctx, "race", nil, redisstore.AppendOptions{})
			require.NoError(t, err)
			assert.False(t, res.HasPending)
		})
	}
}
