package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
)

// panickingClient panics on every script call while armed (after a short
// wait, so that other appends queue behind it), as rueidis v1.0.79 did
// inside a durable group redirected by ASK (issue 22).
type panickingClient struct {
	rueidis.Client
	armed  atomic.Bool
	panics atomic.Int64
}

func (c *panickingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if name := cmd.Commands()[0]; c.armed.Load() && (name == "EVALSHA" || name == "EVAL") {
		c.panics.Add(1)
		time.Sleep(20 * time.Millisecond) // let more appends queue behind the round
		panic(fmt.Sprintf("boom in %s", name))
	}
	return c.Client.Do(ctx, cmd)
}

// A panic under the store's appends — in the caller's goroutine or in a
// coalescer goroutine carrying other callers' batches — becomes an error on
// every waiting call (a *a2redis.BatchError with its ids, the outcome being
// unknown); the process survives, no call hangs, and the session's line is
// not left wedged: once the panics stop, appends go through again.
func TestCoalescerRecoversAPanic(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pc := &panickingClient{Client: tg.Client(t)}
			s, err := New(ctx, pc, Config{Prefix: redistest.Prefix(t), PublishWait: -1})
			require.NoError(t, err)
			pc.armed.Store(true)
			const callers = 64
			var wg sync.WaitGroup
			var failed, other atomic.Int64
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.Append(ctx, "s", []a2redis.Event{{ID: fmt.Sprint("e-", i), Type: "t"}}, AppendOptions{})
					var be *a2redis.BatchError
					switch {
					case errors.As(err, &be) && len(be.IDs) == 1 && be.IDs[0] == fmt.Sprint("e-", i):
						failed.Add(1)
					default:
						other.Add(1)
						t.Errorf("append %d: %v, want a BatchError from the recovered panic", i, err)
					}
				}()
			}
			wg.Wait()
			assert.EqualValues(t, callers, failed.Load())
			assert.Zero(t, other.Load())
			assert.Positive(t, pc.panics.Load())
			assert.Less(t, pc.panics.Load(), int64(callers), "no round carried more than one batch: the coalescer goroutines were not exercised")
			t.Logf("%d appends, %d panics (rounds), all %d calls failed with a BatchError", callers, pc.panics.Load(), failed.Load())

			pc.armed.Store(false)
			for i := range callers {
				_, err := s.Append(ctx, "s", []a2redis.Event{{ID: fmt.Sprint("e-", i), Type: "t"}}, AppendOptions{})
				require.NoError(t, err)
			}
			b, err := s.Bounds(ctx, "s")
			require.NoError(t, err)
			assert.EqualValues(t, callers, b.Head)
			s.coalesce.mu.Lock()
			lines := len(s.coalesce.lines)
			s.coalesce.mu.Unlock()
			assert.Zero(t, lines, "a line was left with a round counted in flight")
		})
	}
}
