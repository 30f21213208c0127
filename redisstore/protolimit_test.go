package redisstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// A server configured below the limits (proto-max-bulk-len 1mb, the least
// it takes) would refuse a payload the store accepts — and drop the
// connection while it is still being sent, which a client cannot tell from
// a network failure. New reads the setting, so a payload past it is
// refused in Go (ErrInvalidArgument, nothing written), and one at it goes
// in; presence values and snapshot states are sent with a few bytes of
// their own (times, index) in one argument, and are bounded so.
func TestServerBelowThePayloadLimit(t *testing.T) {
	in := redistest.SpawnServer(t, "--proto-max-bulk-len", "1mb")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	const bulk = 1 << 20
	_, err = s.Append(ctx, "s", []a2redis.Event{{Type: "t", Payload: jsonOfSize(bulk + 1)}}, redisstore.AppendOptions{})
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "proto-max-bulk-len")
	b, err := s.Bounds(ctx, "s")
	require.NoError(t, err)
	assert.Zero(t, b.Head, "nothing written")
	res, err := s.Append(ctx, "s", []a2redis.Event{{Type: "t", Payload: jsonOfSize(bulk)}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.Events[0].Index)

	w := redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": jsonOfSize(bulk + 1)}, At: time.Now(), TTL: time.Minute}
	_, err = s.PresenceSet(ctx, "s", w)
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	w.Values["f"] = jsonOfSize(bulk - 1000)
	_, err = s.PresenceSet(ctx, "s", w)
	require.NoError(t, err)
	require.ErrorIs(t, s.PutSnapshots(ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 1, State: jsonOfSize(bulk)}}), a2redis.ErrInvalidArgument)
	require.NoError(t, s.PutSnapshots(ctx, "s", "r", []redisstore.SnapshotWrite{{Index: 1, State: jsonOfSize(bulk - 1000)}}))
}
