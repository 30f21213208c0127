package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
)

// A block batch sent again under the same nonce (a resent call whose first
// reply was lost) replays, whether the first try went in an earlier call
// or earlier in the same one.
func TestBlockBatchResentReplays(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := New(ctx, tg.Client(t), Config{Prefix: redistest.Prefix(t), PublishWait: -1})
			require.NoError(t, err)
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
}
