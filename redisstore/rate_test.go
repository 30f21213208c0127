package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// TestRateLimit: a window grants at most its limit, a give-back returns
// unused starts, and the next window grants afresh; bad input is refused.
func TestRateLimit(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t)})
			require.NoError(t, err)
			limit := redisstore.RateLimit{Starts: 10, Per: time.Hour}
			g, err := s.TakeStarts(ctx, "mailer", limit, 7)
			require.NoError(t, err)
			require.Equal(t, 7, g.Starts)
			require.Greater(t, g.Wait, time.Duration(0))
			require.LessOrEqual(t, g.Wait, time.Hour)
			g, err = s.TakeStarts(ctx, "mailer", limit, 7)
			require.NoError(t, err)
			require.Equal(t, 3, g.Starts, "the rest of the window")
			used, err := s.TakeStarts(ctx, "mailer", limit, 1)
			require.NoError(t, err)
			require.Zero(t, used.Starts, "used up")
			require.NoError(t, s.GiveBackStarts(ctx, "mailer", limit, g, 2))
			g, err = s.TakeStarts(ctx, "mailer", limit, 5)
			require.NoError(t, err)
			require.Equal(t, 2, g.Starts, "the two given back")
			other, err := s.TakeStarts(ctx, "billing", limit, 5)
			require.NoError(t, err)
			require.Equal(t, 5, other.Starts, "each consumer has its own limit")

			short := redisstore.RateLimit{Starts: 3, Per: 50 * time.Millisecond}
			g, err = s.TakeStarts(ctx, "fast", short, 5)
			require.NoError(t, err)
			require.Equal(t, 3, g.Starts)
			time.Sleep(g.Wait + 5*time.Millisecond)
			next, err := s.TakeStarts(ctx, "fast", short, 5)
			require.NoError(t, err)
			require.Equal(t, 3, next.Starts, "a new window")
			require.Greater(t, next.Window, g.Window) // +1, or more on a slow machine

			for _, bad := range []redisstore.RateLimit{{Starts: 0, Per: time.Second}, {Starts: 1, Per: 0}} {
				_, err := s.TakeStarts(ctx, "mailer", bad, 1)
				require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
			}
			_, err = s.TakeStarts(ctx, "mailer", limit, 0)
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
			_, err = s.TakeStarts(ctx, "", limit, 1)
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
			require.ErrorIs(t, s.GiveBackStarts(ctx, "mailer", limit, other, 6), a2redis.ErrInvalidArgument, "more than the grant")
		})
	}
}

// TestRateGiveBackAfterItsWindow: starts taken in one window and given
// back in the next go back to nothing — the window now running did not
// grant them — so that window grants its limit, never more (the worker
// gives back a claim's unused starts, and its claim may end after the
// window does: three worker processes over a minute once saw a window of
// 48 starts for a limit of 40 from it).
func TestRateGiveBackAfterItsWindow(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t)})
			require.NoError(t, err)
			limit := redisstore.RateLimit{Starts: 5, Per: 500 * time.Millisecond}
			// The steps after the first window must fall in one window; a
			// machine too slow for that makes the try void (not a failure),
			// and the test tries again with a consumer of its own.
			for try := 0; ; try++ {
				require.Less(t, try, 20, "no try kept its steps within one window")
				c := fmt.Sprint("c", try)
				old, err := s.TakeStarts(ctx, c, limit, 2)
				require.NoError(t, err)
				require.Equal(t, 2, old.Starts)
				time.Sleep(old.Wait + 5*time.Millisecond)
				cur, err := s.TakeStarts(ctx, c, limit, 5)
				require.NoError(t, err)
				require.Equal(t, 5, cur.Starts, "the next window grants its limit")
				require.Greater(t, cur.Window, old.Window)
				require.NoError(t, s.GiveBackStarts(ctx, c, limit, old, 2))
				more, err := s.TakeStarts(ctx, c, limit, 5)
				require.NoError(t, err)
				if more.Window != cur.Window {
					t.Logf("try %d: the window rolled between the steps; again", try)
					continue
				}
				require.Zero(t, more.Starts, "the old window's starts were not given back to this one")
				require.NoError(t, s.GiveBackStarts(ctx, c, limit, cur, 1))
				more, err = s.TakeStarts(ctx, c, limit, 5)
				require.NoError(t, err)
				if more.Window != cur.Window {
					t.Logf("try %d: the window rolled between the steps; again", try)
					continue
				}
				require.Equal(t, 1, more.Starts, "its own window's start is")
				break
			}
		})
	}
}

// TestRateLimitAcrossStores: three stores (their own clients) taking as
// fast as they can share one count: over the run the starts granted are
// the limit times the windows begun, never more.
func TestRateLimitAcrossStores(t *testing.T) {
	for _, target := range []string{"redis", "cluster"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := "redis://" + redistest.ServerAddr(t)
			if target == "cluster" {
				url = "redis://" + redistest.ClusterAddrs(t)[0]
			}
			prefix := redistest.Prefix(t)
			limit := redisstore.RateLimit{Starts: 20, Per: 100 * time.Millisecond}
			var granted atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			const run = 1500 * time.Millisecond
			for p := 0; p < 3; p++ {
				client, err := redisstore.Dial(ctx, url)
				require.NoError(t, err)
				defer client.Close()
				s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < run {
						g, err := s.TakeStarts(ctx, "c", limit, 4)
						if err != nil {
							t.Error(err)
							return
						}
						granted.Add(int64(g.Starts))
						if g.Starts == 0 {
							time.Sleep(g.Wait)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			windows := int64(elapsed/limit.Per) + 2 // the first and the last are partial
			require.LessOrEqual(t, granted.Load(), windows*int64(limit.Starts), "never more than the limit per window")
			t.Logf("%d starts granted in %v (limit %d per %v: at most %d)", granted.Load(), elapsed.Round(time.Millisecond), limit.Starts, limit.Per, windows*int64(limit.Starts))
		})
	}
}

// TestRateUsages: the running window's starts and its end, per consumer;
// a consumer that took no start reads as no window.
func TestRateUsages(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t)})
			require.NoError(t, err)
			limit := redisstore.RateLimit{Starts: 10, Per: time.Hour}
			g, err := s.TakeStarts(ctx, "mailer", limit, 4)
			require.NoError(t, err)
			require.Equal(t, 4, g.Starts)
			require.NoError(t, s.GiveBackStarts(ctx, "mailer", limit, g, 1))
			us, err := s.RateUsages(ctx, "mailer", "idle")
			require.NoError(t, err)
			require.Len(t, us, 2)
			require.Equal(t, "mailer", us[0].Consumer)
			require.Equal(t, 3, us[0].Starts)
			require.Greater(t, us[0].EndsIn, time.Duration(0))
			require.LessOrEqual(t, us[0].EndsIn, g.Wait)
			require.Equal(t, redisstore.RateUsage{Consumer: "idle"}, us[1])
			_, err = s.RateUsages(ctx, "")
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		})
	}
}
