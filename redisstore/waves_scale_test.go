package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// envWaveSessions and envWaves size TestMemoryFollowsLiveSessions: the
// sessions of each wave (default 1,000,000) and the waves (default 2).
const (
	envWaveSessions = "A2REDIS_WAVE_SESSIONS"
	envWaves        = "A2REDIS_WAVES"
)

// TestMemoryFollowsLiveSessions runs sessions through whole lives in
// waves on a private redis-server with the default configuration: each
// session gets an event, its head is claimed and completed, and then a
// third of the sessions are dropped (Store.Drop), a third ended (Clear +
// Reclaim) and a third left idle; the clock then moves past the idle time
// and retention passes (Drop: true) run until a whole scan finds nothing
// more. After every wave the server's used_memory, its key count and every
// prefix-wide key (the ready shards, the registry, the retention cursor:
// whatever is left) must be back within 5% of what they were before the
// first wave. A measurement of memory at scale, not a behaviour test: it
// runs only with A2REDIS_SCALE=1 (minutes: about 15 script calls per
// session).
func TestMemoryFollowsLiveSessions(t *testing.T) {
	if os.Getenv(envScale) != "1" {
		t.Skipf("set %s=1 to run (minutes)", envScale)
	}
	perWave := scaleSize(t, envWaveSessions, 1_000_000)
	waves := scaleSize(t, envWaves, 2)
	srv := redistest.SpawnServer(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	var clockMS atomic.Int64
	clockMS.Store(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clockMS.Load()) }
	const prefix, idle = "waves", time.Hour
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, PublishWait: -1, Clock: now,
		Consumers: []a2redis.Consumer{{Name: "c"}}})
	require.NoError(t, err)

	// One life per session; which way it ends depends on n.
	life := func(ctx context.Context, session string, n int) error {
		if _, err := store.Append(ctx, session, []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`), Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{}); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(claim.Heads) != 1 {
			return fmt.Errorf("claim: %d heads", len(claim.Heads))
		}
		if _, err := store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(claim.Heads[0])}}); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		switch n % 3 {
		case 0:
			if _, err := store.Drop(ctx, session); err != nil {
				return fmt.Errorf("drop: %w", err)
			}
		case 1:
			if _, err := store.Clear(ctx, session, redisstore.ClearOptions{}); err != nil {
				return fmt.Errorf("clear: %w", err)
			}
			if _, err := store.Reclaim(ctx, session); err != nil {
				return fmt.Errorf("reclaim: %w", err)
			}
		}
		return nil
	}
	// A wave: every session's life, 64 at a time, then retention until a
	// whole scan drops nothing.
	wave := func(w, sessions int) (peak memFigures, retained int, took time.Duration) {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := int(next.Add(1)) - 1
					if n >= sessions || ctx.Err() != nil {
						return
					}
					if err := life(ctx, fmt.Sprintf("order-%d-%07d", w, n), n); err != nil {
						select {
						case errs <- fmt.Errorf("session %d: %w", n, err):
						default:
						}
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		peak = readMem(t, ctx, client, prefix)
		clockMS.Add(2 * idle.Milliseconds())
		for quiet := 0; quiet < 2; {
			cursor := ""
			dropped := 0
			for {
				res, err := store.Retention(ctx, redisstore.RetentionPolicy{IdleFor: idle, Drop: true, MaxSessions: 5000, MaxScan: 50_000}, cursor)
				require.NoError(t, err)
				dropped += res.Dropped
				retained += res.Dropped
				if cursor = res.Cursor; cursor == "" {
					break
				}
			}
			if dropped == 0 {
				quiet++
			}
		}
		return peak, retained, time.Since(start)
	}

	// Warm up (scripts loaded, shards and registry written), then the
	// baseline.
	_, _, _ = wave(0, 300)
	before := settledMem(t, ctx, client, prefix, nil)
	t.Logf("before: %s", before)
	for w := 1; w <= waves; w++ {
		peak, retained, took := wave(w, perWave)
		after := settledMem(t, ctx, client, prefix, &before)
		t.Logf("wave %d: %d sessions in %v; at its peak %s (%.0f B a session); %d dropped by retention; after: %s",
			w, perWave, took.Round(time.Second), peak, float64(peak.used-before.used)/float64(perWave), retained, after)
		assert.InEpsilon(t, before.used, after.used, 0.05, "used_memory back within 5%%")
		assert.Equal(t, before.keys, after.keys, "keys")
		for k, b := range before.prefixWide {
			a := after.prefixWide[k]
			assert.InEpsilon(t, b.bytes, max(a.bytes, 1), 0.05, "%s: bytes", k)
			assert.LessOrEqual(t, a.elements, b.elements+b.elements/20, "%s: elements", k)
		}
		for k, a := range after.prefixWide {
			_, ok := before.prefixWide[k]
			assert.True(t, ok, "%s (%d B, %d elements) appeared", k, a.bytes, a.elements)
		}
	}
}

// keyFigures is one key's MEMORY USAGE and element count.
type keyFigures struct{ bytes, elements int64 }

// memFigures is the server's used_memory, its key count and the
// prefix-wide keys (every key of the prefix outside a session's slot).
type memFigures struct {
	used       int64
	keys       int64
	prefixWide map[string]keyFigures
}

func (m memFigures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "used_memory %d B, %d keys; prefix-wide:", m.used, m.keys)
	for k, f := range m.prefixWide {
		fmt.Fprintf(&b, " %s %d B/%d", k, f.bytes, f.elements)
	}
	return b.String()
}

// readMem reads used_memory, DBSIZE and, when the server holds few keys,
// every prefix-wide key (a session's keys carry a tag starting with '"').
func readMem(t *testing.T, ctx context.Context, c rueidis.Client, prefix string) memFigures {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	require.NoError(t, err)
	m := memFigures{prefixWide: map[string]keyFigures{}}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			m.used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	m.keys, err = c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	if m.keys > 10_000 {
		return m
	}
	var cursor uint64
	for {
		page, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		for _, key := range page.Elements {
			if !strings.HasPrefix(key, prefix+":") || strings.HasPrefix(key, prefix+":{\"") {
				continue
			}
			used, err := c.Do(ctx, c.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
			require.NoError(t, err)
			m.prefixWide[key] = keyFigures{bytes: used, elements: elementsOf(t, ctx, c, key)}
		}
		if cursor = page.Cursor; cursor == 0 {
			break
		}
	}
	return m
}

// elementsOf counts a key's fields, members or entries (1 for a string).
func elementsOf(t *testing.T, ctx context.Context, c rueidis.Client, key string) int64 {
	t.Helper()
	typ, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
	require.NoError(t, err)
	var cmd rueidis.Completed
	switch typ {
	case "hash":
		cmd = c.B().Hlen().Key(key).Build()
	case "zset":
		cmd = c.B().Zcard().Key(key).Build()
	case "set":
		cmd = c.B().Scard().Key(key).Build()
	case "list":
		cmd = c.B().Llen().Key(key).Build()
	case "stream":
		cmd = c.B().Xlen().Key(key).Build()
	default:
		return 1
	}
	n, err := c.Do(ctx, cmd).AsInt64()
	require.NoError(t, err)
	return n
}

// settledMem waits until the server's memory stops falling (its main
// dictionary shrinks in the background after mass deletes) or, given a
// baseline, comes within 5% of it, for at most a minute.
func settledMem(t *testing.T, ctx context.Context, c rueidis.Client, prefix string, baseline *memFigures) memFigures {
	t.Helper()
	m := readMem(t, ctx, c, prefix)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
		again := readMem(t, ctx, c, prefix)
		done := again.used >= m.used
		if baseline != nil {
			done = float64(again.used) <= 1.05*float64(baseline.used)
		}
		m = again
		if done {
			break
		}
	}
	return m
}
