package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// TestSubsetClaimScansPastOthersHeads: a claim serving one consumer finds
// its heads behind thousands of free heads of others, whose scores tie by
// the thousand (one event, a thousand event-cursor targets): the free-head
// scan is cut into calls (scripts.ClaimScan entries each) that go on from
// the last score and the ties of it already seen, and misses none.
func TestSubsetClaimScansPastOthersHeads(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			store, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t)})
			require.NoError(t, err)
			const ties, events = 1000, 3
			targets := make([]a2redis.Target, ties)
			for i := range targets {
				targets[i] = a2redis.Target{Consumer: fmt.Sprintf("other-%04d", i)}
			}
			for range events {
				_, err := store.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: targets}}, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			// The served consumer's heads: one on a lane after every tie,
			// one on an event cursor at the same index as others' heads.
			res, err := store.Append(ctx, "s", []a2redis.Event{
				{Type: "t", Targets: []a2redis.Target{{Consumer: "mine", Lane: "x"}}},
			}, redisstore.AppendOptions{})
			require.NoError(t, err)
			last := res.Events[0].Index
			_, err = store.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: append(targets[:10:10], a2redis.Target{Consumer: "mine"})}}, redisstore.AppendOptions{})
			require.NoError(t, err)

			mine := []a2redis.Consumer{{Name: "mine"}}
			claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: mine, Limit: 16})
			require.NoError(t, err)
			require.Equal(t, redisstore.Claimed, claim.Outcome)
			got := map[int64]string{}
			for _, h := range claim.Heads {
				got[h.Index] = h.Lane
			}
			require.Equal(t, map[int64]string{last: "x", last + 1: ""}, got)

			// Nothing left for it: settled, after scanning them all again.
			claim, err = store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: mine, Limit: 16})
			require.NoError(t, err)
			require.Equal(t, redisstore.Busy, claim.Outcome, "its heads are held")
		})
	}
}
