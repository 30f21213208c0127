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

// eachStore runs fn against a store on every target, in parallel subtests:
// for tests that reach inside the store.
func eachStore(t *testing.T, fn func(t *testing.T, ctx context.Context, s *Store)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := New(ctx, tg.Client(t), Config{Prefix: redistest.Prefix(t), PublishWait: -1})
			require.NoError(t, err)
			fn(t, ctx, s)
		})
	}
}

// A block batch sent again under the same nonce (a resent call whose first
// reply was lost) replays, whether the first try went in an earlier call
// or earlier in the same one.
func TestBlockBatchResentReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, ctx context.Context, s *Store) {
		head := int64(0)
		// A batch of two has an id block; a batch of one, its id key.
		for _, events := range [][]a2redis.Event{{{Type: "t"}, {Type: "u"}}, {{Type: "v"}}} {
			batch, nonce, err := s.prepare(events, "events")
			require.NoError(t, err)
			require.NotEmpty(t, nonce)
			call := func() *plainCall {
				return &plainCall{ctx: ctx, batch: batch, nonce: nonce, heads: make([][]string, len(batch))}
			}

			first, again := call(), call()
			s.runPlain("s", "", []*plainCall{first, again})
			require.NoError(t, first.err)
			require.NoError(t, again.err)
			assert.False(t, first.res.Replayed)
			assert.True(t, again.res.Replayed)
			assert.Equal(t, first.res.Events, again.res.Events)

			later := call()
			s.runPlain("s", "", []*plainCall{later})
			require.NoError(t, later.err)
			assert.True(t, later.res.Replayed)
			assert.Equal(t, first.res.Events, later.res.Events)
			head += int64(len(events))
			b, err := s.Bounds(ctx, "s")
			require.NoError(t, err)
			assert.Equal(t, head, b.Head)
		}
	})
}

// A claim's events are read after the claim. A head whose event a clear and
// a reclaim deleted in between is left out; a missing event above the clear
// marker is a gap.
func TestClaimedEventsAfterAClear(t *testing.T) {
	eachStore(t, func(t *testing.T, ctx context.Context, s *Store) {
		_, err := s.Append(ctx, "s", []a2redis.Event{{Type: "a"}, {Type: "b"}}, AppendOptions{})
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
