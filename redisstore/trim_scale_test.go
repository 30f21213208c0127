package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// TestTrimAtScale measures a trim of a long-lived session on a private
// redis-server that logs every call: 20,000 events for one consumer, every
// one handled, trimmed to the newest 100 — the session's memory and keys
// before and after, and the trim's script calls (each under 20 ms:
// boundCalls). With A2REDIS_SCALE=1 (make scale).
func TestTrimAtScale(t *testing.T) {
	if os.Getenv(envScale) != "1" {
		t.Skipf("set %s=1 to measure", envScale)
	}
	srv := redistest.SpawnServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	clock := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "trimscale", Clock: clock.Now})
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, store: store, clock: clock, client: client, prefix: "trimscale"}
	shas := map[string]string{}
	for name, s := range scripts.All() {
		sum := sha1.Sum([]byte(s.Source))
		shas[hex.EncodeToString(sum[:])] = name
	}
	const session, n = "long", 20_000
	events := make([]a2redis.Event, n)
	for i := range events {
		events[i] = a2redis.Event{Type: "t", Payload: benchPayload, Targets: []a2redis.Target{{Consumer: "c"}}}
	}
	for part := range slices.Chunk(events, redisstore.DefaultMaxBatch) {
		_, err := store.Append(ctx, session, part, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	for {
		if len(handleHeads(t, e, session, redisstore.DefaultMaxBatch)) == 0 {
			break
		}
	}
	before, keysBefore, _ := sessionMemory(t, e, session)
	slowest(t, ctx, client, shas)
	start := time.Now()
	res, err := store.Trim(ctx, session, redisstore.TrimRequest{KeepLast: 100})
	wall := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, int64(n-100), res.Removed)
	times := slowest(t, ctx, client, shas)
	after, keysAfter, _ := sessionMemory(t, e, session)
	s := times["trim"]
	require.NotNil(t, s)
	t.Logf("session of %d handled events: %d B in %d keys before, %d B in %d keys after the trim to the newest 100", n, before, keysBefore, after, keysAfter)
	t.Logf("trim: %d calls, median %v, p99 %v, longest %v, %d over 20ms; wall %v", len(s.calls), s.at(0.5), s.at(0.99), s.at(1), s.over(20*time.Millisecond), wall.Round(time.Millisecond))
	boundCalls(t, "Trim", s)
}
