package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"encoding/json"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

func ev(typ, payload string) a2redis.Event {
	return a2redis.Event{Type: typ, Payload: json.RawMessage(payload)}
}

func TestAppendAndRead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res, err := e.store.Append(e.ctx, "s1", []a2redis.Event{ev("a", `{"n":1}`), ev("b", `[1, 2]`)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 2)
		assert.Equal(t, int64(1), res.Events[0].Index)
		assert.Equal(t, int64(2), res.Events[1].Index)
		assert.False(t, res.HasPending)

		got, err := e.store.Read(e.ctx, "s1", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 2)
		assert.Equal(t, res.Events[0].ID, got[0].ID)
		assert.JSONEq(t, `{"n":1}`, string(got[0].Payload))
		assert.Equal(t, `[1, 2]`, string(got[1].Payload))
		assert.Equal(t, e.clock.Now().UnixMilli(), got[1].CreatedAt.UnixMilli())
	})
}

func TestAppendReplayAndPartial(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		batch := []a2redis.Event{{ID: "x", Type: "t", Payload: json.RawMessage(`1`)}, {ID: "y", Type: "t"}}
		first, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, first.Replayed)

		// A lost-ack retry returns the original rows and writes nothing.
		e.clock.Advance(time.Second)
		again, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, again.Replayed)
		assert.Equal(t, first.Events, again.Events)
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, int64(2), b.Head)

		// Replayed in request order.
		swapped, err := e.store.Append(e.ctx, "s", []a2redis.Event{batch[1], batch[0]}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, []int64{2, 1}, []int64{swapped.Events[0].Index, swapped.Events[1].Index})

		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{ID: "x", Type: "t"}, {ID: "z", Type: "t"}}, redisstore.AppendOptions{})
		require.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)
		b, err = e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, int64(2), b.Head, "a partial duplicate writes nothing")

		// Ids are per session: another session may reuse them.
		other, err := e.store.Append(e.ctx, "s2", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, other.Replayed)
	})
}

func TestAppendRejectsBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		cases := map[string]struct {
			session string
			events  []a2redis.Event
			opts    redisstore.AppendOptions
		}{
			"empty session":     {"", []a2redis.Event{ev("t", "1")}, redisstore.AppendOptions{}},
			"empty type":        {"s", []a2redis.Event{ev("", "1")}, redisstore.AppendOptions{}},
			"bad json":          {"s", []a2redis.Event{ev("t", "{nope")}, redisstore.AppendOptions{}},
			"reserved type":     {"s", []a2redis.Event{ev(a2redis.ClearEventType, "1")}, redisstore.AppendOptions{}},
			"duplicate id":      {"s", []a2redis.Event{{ID: "a", Type: "t"}, {ID: "a", Type: "t"}}, redisstore.AppendOptions{}},
			"negative origin":   {"s", []a2redis.Event{ev("t", "1")}, redisstore.AppendOptions{OriginIndex: -1}},
			"empty target":      {"s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{}}}}, redisstore.AppendOptions{}},
			"cause index 0":     {"s", []a2redis.Event{{Type: "t", Cause: &a2redis.Cause{Consumer: "c", Attempt: 1}}}, redisstore.AppendOptions{}},
			"cause attempt 0":   {"s", []a2redis.Event{{Type: "t", Cause: &a2redis.Cause{Consumer: "c", Index: 1}}}, redisstore.AppendOptions{}},
			"empty consumer":    {"s", []a2redis.Event{ev("t", "1")}, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{}}}},
			"log without lane":  {"s", []a2redis.Event{ev("t", "1")}, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{Name: "c", Log: &a2redis.LogSpec{}}}}},
			"batch over limit":  {"s", make([]a2redis.Event, redisstore.DefaultMaxBatch+1), redisstore.AppendOptions{}},
			"invalid utf8 type": {"s", []a2redis.Event{ev("\xff", "1")}, redisstore.AppendOptions{}},
		}
		for name, c := range cases {
			_, err := e.store.Append(e.ctx, c.session, c.events, c.opts)
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument, name)
			var arg *a2redis.ArgumentError
			require.ErrorAs(t, err, &arg, name)
		}
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, redisstore.Bounds{}, b, "nothing was written")
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	_, err := redisstore.New(ctx, nil, redisstore.Config{})
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	_, client := redistest.Miniredis(t)
	_, err = redisstore.New(ctx, client, redisstore.Config{Prefix: "a{b"})
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	_, err = redisstore.New(ctx, client, redisstore.Config{KeyLocking: 9})
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
}

func TestLayoutMismatch(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		other := e.prefix + "-old"
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Set().Key(keys.Schema(other)).Value("flat-0").Build()).Error())
		_, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: other})
		require.ErrorIs(t, err, a2redis.ErrLayoutMismatch)
		var le *a2redis.LayoutError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, other, le.Prefix)
		assert.Equal(t, "flat-0", le.Found)
		assert.Equal(t, keys.Layout, le.Want)
		assert.Contains(t, err.Error(), other)

		// The same layout is accepted again.
		_, err = redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix})
		require.NoError(t, err)
	})
}

func TestKeyLockingProbe(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		enabled, known := e.store.KeyLockingEnabled()
		assert.True(t, known)
		assert.False(t, enabled, "Redis and miniredis reject the flag")
	})
}

func TestOddIdsRoundTripAndStayIsolated(t *testing.T) {
	long := strings.Repeat("x{}", 64*1024/3)
	ids := []string{"a", "{b}", `"q"`, "c:d", "%s", "nul\x00byte", "\xff\xfe", "日本語", "}{", long, `a2:{"s"}:count`}
	each(t, func(t *testing.T, e *env) {
		for _, session := range ids {
			for j, id := range ids {
				_, err := e.store.Append(e.ctx, session, []a2redis.Event{{ID: id, Type: "t", Payload: json.RawMessage(strconv.Itoa(j))}}, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
		}
		for _, session := range ids {
			got, err := e.store.Read(e.ctx, session, 0, 0)
			require.NoError(t, err)
			require.Len(t, got, len(ids), "session %q holds only its own events", session)
			for j, g := range got {
				assert.Equal(t, ids[j], g.ID)
				assert.Equal(t, session, g.Session)
				assert.Equal(t, strconv.Itoa(j), string(g.Payload))
			}
		}
	})
}

func TestBigBatchAndPagedRead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		batch := make([]a2redis.Event, 5000)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", Payload: json.RawMessage(strconv.Itoa(i))}
		}
		for part := range slices.Chunk(batch, redisstore.DefaultMaxBatch) {
			res, err := e.store.Append(e.ctx, "big", part, redisstore.AppendOptions{})
			require.NoError(t, err)
			require.Len(t, res.Events, len(part))
		}
		got, err := e.store.Read(e.ctx, "big", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 5000)
		for i, g := range got {
			require.Equal(t, int64(i+1), g.Index)
		}
		part, err := e.store.Read(e.ctx, "big", 100, 600)
		require.NoError(t, err)
		require.Len(t, part, 500)
		assert.Equal(t, int64(101), part[0].Index)
		tail, err := e.store.ReadTail(e.ctx, "big", 3)
		require.NoError(t, err)
		assert.Equal(t, []int64{4998, 4999, 5000}, indexes(tail))
		var pages int
		require.NoError(t, e.store.ReadPages(e.ctx, "big", 0, 0, func(p []a2redis.StoredEvent) error {
			pages++
			assert.LessOrEqual(t, len(p), redisstore.ReadPageSize)
			return nil
		}))
		assert.Equal(t, (5000+redisstore.ReadPageSize-1)/redisstore.ReadPageSize, pages)
	})
}

func indexes(events []a2redis.StoredEvent) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Index
	}
	return out
}
