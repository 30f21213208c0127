package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
)

// A claim's events are read after the claim. A head whose event a clear and
// a reclaim deleted in between is left out; a missing event above the clear
// marker is a gap.
func TestClaimedEventsAfterAClear(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := New(ctx, tg.Client(t), Config{Prefix: redistest.Prefix(t), PublishWait: -1})
			require.NoError(t, err)
			_, err = s.Append(ctx, "s", []a2redis.Event{{Type: "a"}, {Type: "b"}}, AppendOptions{})
			require.NoError(t, err)
			_, err = s.Clear(ctx, "s", ClearOptions{})
			require.NoError(t, err)
			_, err = s.Append(ctx, "s", []a2redis.Event{{Type: "c"}}, AppendOptions{})
			require.NoError(t, err)
			_, err = s.Reclaim(ctx, "s")
			require.NoError(t, err)

			head := func(idx int64) a2redis.HeadEvent {
				return a2redis.HeadEvent{StoredEvent: a2redis.StoredEvent{Session: "s", Index: idx}, Consumer: "c"}
			}
			r := ClaimResult{Outcome: Claimed, Heads: []a2redis.HeadEvent{head(1), head(2), head(4)}, ClearIndex: 0}
			require.NoError(t, s.claimedEvents(ctx, "s", &r))
			require.Len(t, r.Heads, 1)
			assert.Equal(t, int64(4), r.Heads[0].Index)
			assert.Equal(t, "c", r.Heads[0].Type)
			assert.Equal(t, int64(3), r.ClearIndex)

			r = ClaimResult{Outcome: Claimed, Heads: []a2redis.HeadEvent{head(4), head(9)}}
			err = s.claimedEvents(ctx, "s", &r)
			require.True(t, errors.Is(err, a2redis.ErrRangeGap), "%v", err)
		})
	}
}
