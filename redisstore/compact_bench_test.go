package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// BenchmarkSettle measures what rebuilding a settled session to its size
// (the default; Config.NoCompaction turns it off) costs, against the same work without it in
// the same run: a session's life (n events appended in one batch with an
// event head each, claimed and completed in one CompleteAttempts per 100,
// which settles it), and then appends of one event to settled sessions
// (the first XADD into a rebuilt log grows its node).
//
//	go test ./redisstore -run '^$' -bench Settle -benchtime 2000x -count 3
func BenchmarkSettle(b *testing.B) {
	e := newBench(b)
	stores := map[string]*redisstore.Store{}
	for _, compact := range []bool{false, true} {
		s, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: fmt.Sprintf("settle-%v", compact), NoCompaction: !compact})
		require.NoError(b, err)
		stores[fmt.Sprintf("compact=%v", compact)] = s
	}
	target := []a2redis.Target{{Consumer: "c"}}
	life := func(b *testing.B, st *redisstore.Store, s string, n int) {
		events := make([]a2redis.Event, n)
		for i := range events {
			events[i] = a2redis.Event{Type: "t", Payload: benchPayload, Targets: target}
		}
		_, err := st.Append(e.ctx, s, events, redisstore.AppendOptions{})
		require.NoError(b, err)
		for done := 0; done < n; {
			c, err := st.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Limit: 100})
			require.NoError(b, err)
			require.NotEmpty(b, c.Heads)
			attempts := make([]redisstore.Attempt, len(c.Heads))
			for i, h := range c.Heads {
				attempts[i] = redisstore.AttemptOf(h)
			}
			_, err = st.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: attempts})
			require.NoError(b, err)
			done += len(c.Heads)
		}
	}
	for _, n := range []int{1, 10, 100} {
		for _, name := range []string{"compact=false", "compact=true"} {
			st := stores[name]
			b.Run(fmt.Sprintf("life/events=%d/%s", n, name), func(b *testing.B) {
				done := e.measure(b)
				for i := 0; i < b.N; i++ {
					life(b, st, session("life"), n)
				}
				done(b.N, "session")
			})
		}
	}
	for _, name := range []string{"compact=false", "compact=true"} {
		st := stores[name]
		b.Run("append-1-to-settled/"+name, func(b *testing.B) {
			b.StopTimer()
			sessions := make([]string, b.N)
			for i := range sessions {
				sessions[i] = session("settled")
				life(b, st, sessions[i], 1)
			}
			b.StartTimer()
			done := e.measure(b)
			parallel(b, 16, func(i int) error {
				_, err := st.Append(e.ctx, sessions[i], []a2redis.Event{{Type: "t", Payload: benchPayload}}, redisstore.AppendOptions{})
				return err
			})
			done(b.N, "op")
		})
	}
}

// TestCompactionCost reports compact_log's run time per call (SLOWLOG at
// threshold 0 on a private redis-server) for settled sessions of 1 to 256
// events, and for 256 events whose payloads bring the log to the byte
// bound (CompactBytes): no call may hold the server long. A measurement,
// not a behaviour test: it runs only with A2REDIS_SCALE=1 (SLOWLOG times
// are wall times, which on a shared machine include time the server was
// not scheduled).
func TestCompactionCost(t *testing.T) {
	if os.Getenv(envScale) != "1" {
		t.Skipf("set %s=1 to measure", envScale)
	}
	srv := redistest.SpawnServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx := context.Background()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "compactcost"})
	require.NoError(t, err)
	shas := map[string]string{}
	for name, s := range scripts.All() {
		sum := sha1.Sum([]byte(s.Source))
		shas[hex.EncodeToString(sum[:])] = name
	}
	big := []byte(`"` + strings.Repeat("x", 150) + `"`)
	for _, c := range []struct {
		events  int
		payload []byte
	}{{1, benchPayload}, {10, benchPayload}, {100, benchPayload}, {256, benchPayload}, {256, big}} {
		const sessions = 200
		slowest(t, ctx, client, shas)
		for i := range sessions {
			s := fmt.Sprintf("s-%d-%d-%d", c.events, len(c.payload), i)
			events := make([]a2redis.Event, c.events)
			for j := range events {
				events[j] = a2redis.Event{Type: "t", Payload: c.payload, Targets: []a2redis.Target{{Consumer: "c"}}}
			}
			_, err := store.Append(ctx, s, events, redisstore.AppendOptions{})
			require.NoError(t, err)
			for {
				cl, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Limit: 100})
				require.NoError(t, err)
				if len(cl.Heads) == 0 {
					break
				}
				done := make([]redisstore.Attempt, len(cl.Heads))
				for k, h := range cl.Heads {
					done[k] = redisstore.AttemptOf(h)
				}
				_, err = store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: done})
				require.NoError(t, err)
			}
		}
		times := slowest(t, ctx, client, shas)
		k := keys.For("compactcost", fmt.Sprintf("s-%d-%d-0", c.events, len(c.payload)))
		used, err := client.Do(ctx, client.B().MemoryUsage().Key(k.Log()).Samples(0).Build()).AsInt64()
		require.NoError(t, err)
		if s := times["compact_log"]; s != nil {
			t.Logf("%3d events of %3d B (log %6d B after): compact_log %d calls, median %v, p99 %v, longest %v; complete_fast median %v",
				c.events, len(c.payload), used, len(s.calls), s.at(0.5), s.at(0.99), s.at(1), times["complete_fast"].at(0.5))
		}
	}
}
