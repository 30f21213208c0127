package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// envDropEvents sets TestDropAtScale's session size (default 1,000,000
// events, each with an event head and its own id key).
const envDropEvents = "A2REDIS_DROP_EVENTS"

// TestDropAtScale drops one big session (events with explicit ids, so one
// id key each, and an event head each) on a private redis-server that logs
// every command in its SLOWLOG, and reports each script's calls and their
// longest run time: no call may hold Redis long however big the session
// is. A measurement, not a behaviour test: it runs only with
// A2REDIS_SCALE=1 (SLOWLOG times are wall times, which on a shared
// machine include time the server was not scheduled).
func TestDropAtScale(t *testing.T) {
	if os.Getenv(envScale) != "1" {
		t.Skipf("set %s=1 to measure (minutes)", envScale)
	}
	events := scaleSize(t, envDropEvents, 1_000_000)
	srv := redistest.SpawnServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000000")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true, ConnWriteTimeout: 5 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "dropscale", PublishWait: -1})
	require.NoError(t, err)
	shas := map[string]string{}
	for name, s := range scripts.All() {
		sum := sha1.Sum([]byte(s.Source))
		shas[hex.EncodeToString(sum[:])] = name
	}
	const session, perBatch = "big", 1000
	for done := 0; done < events; done += perBatch {
		batch := make([]a2redis.Event, perBatch)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", ID: fmt.Sprintf("e%d", done+i), Targets: []a2redis.Target{{Consumer: "c"}}}
		}
		_, err := store.Append(ctx, session, batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	n, err := client.Do(ctx, client.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	slowest(t, ctx, client, shas)
	cpu := serverCPU(t, ctx, client)
	start := time.Now()
	res, err := store.Drop(ctx, session)
	require.NoError(t, err)
	wall := time.Since(start)
	require.True(t, res.Dropped)
	cpu = serverCPU(t, ctx, client) - cpu
	times := slowest(t, ctx, client, shas)
	t.Logf("dropped %d events (%d keys before) in %v wall, %v of the server's main-thread CPU", res.Deleted, n, wall.Round(time.Millisecond), cpu.Round(time.Millisecond))
	calls := 0
	for _, name := range []string{"clear", "reclaim", "drop", "ready_forget"} {
		if s := times[name]; s != nil {
			calls += len(s.calls)
			t.Logf("%-13s %6d calls: longest %8v, p99 %8v, median %8v, %d over 1ms", name, len(s.calls), s.at(1), s.at(0.99), s.at(0.5), s.over(time.Millisecond))
		}
	}
	t.Logf("main-thread CPU per script call: %v", (cpu / time.Duration(max(calls, 1))).Round(time.Microsecond))
	if s := times["reclaim"]; s != nil {
		// Which calls were long: the log's pages come first, the sweep's
		// calls last.
		for i, d := range s.seq {
			if d > time.Millisecond {
				t.Logf("reclaim call %d of %d: %v", i+1, len(s.seq), d)
			}
		}
	}
	left, err := client.Do(ctx, client.B().Scan().Cursor(0).Match(keys.EscapeGlob(keys.For("dropscale", session).Base())+"*").Count(1000).Build()).AsScanEntry()
	require.NoError(t, err)
	assert.Empty(t, left.Elements)
}
