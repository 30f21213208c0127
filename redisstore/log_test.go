package redisstore_test

import (
	"encoding/json"
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
