package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Environment of TestScale.
const (
	// envScale runs TestScale when "1" (it takes minutes and a few GB).
	envScale = "A2REDIS_SCALE"
	// envScaleHeads, envScaleLanes and envScaleDead set the session's event
	// heads, lane cursors and dead letters (defaults 1,000,000, 100,000 and
	// 100,000).
	envScaleHeads = "A2REDIS_SCALE_HEADS"
	envScaleLanes = "A2REDIS_SCALE_LANES"
	envScaleDead  = "A2REDIS_SCALE_DEAD"
)

func scaleSize(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

// slowest reads a SLOWLOG that logs every command (slowlog-log-slower-than
// 0) and resets it: per script (by name), its calls and its longest and
// total run time.
type scriptTimes struct {
	name       string
	calls      int
	max, total time.Duration
}

func slowest(t *testing.T, ctx context.Context, c rueidis.Client, shas map[string]string) map[string]*scriptTimes {
	t.Helper()
	entries, err := c.Do(ctx, c.B().Arbitrary("SLOWLOG", "GET", "-1").Build()).ToArray()
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, c.B().Arbitrary("SLOWLOG", "RESET").Build()).Error())
	out := map[string]*scriptTimes{}
	for _, e := range entries {
		fields, err := e.ToArray()
		require.NoError(t, err)
		us, err := fields[2].AsInt64()
		require.NoError(t, err)
		args, err := fields[3].ToArray()
		require.NoError(t, err)
		cmd, _ := args[0].ToString()
		name := cmd
		if cmd == "EVALSHA" || cmd == "evalsha" {
			sha, _ := args[1].ToString()
			if name = shas[sha]; name == "" {
				name = "script " + sha
			}
		}
		s := out[name]
		if s == nil {
			s = &scriptTimes{name: name}
			out[name] = s
		}
		s.calls++
		d := time.Duration(us) * time.Microsecond
		s.total += d
		s.max = max(s.max, d)
	}
	return out
}

// TestScale builds one big session on a private redis-server that logs
// every command in its SLOWLOG — event heads, lane cursors with a head
// each, dead letters — and reports, per operation, the longest single
// script call and the calls it took: no call may hold Redis long however
// big the session is (the goal: under 20 ms). A measurement, not a
// behaviour test: it runs only with A2REDIS_SCALE=1.
func TestScale(t *testing.T) {
	if os.Getenv(envScale) != "1" {
		t.Skipf("set %s=1 to measure (minutes, a few GB of memory)", envScale)
	}
	heads := scaleSize(t, envScaleHeads, 1_000_000)
	lanes := scaleSize(t, envScaleLanes, 100_000)
	deadLetters := scaleSize(t, envScaleDead, 100_000)
	srv := redistest.SpawnServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000000")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	clock := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "scale", Clock: clock.Now, PublishWait: -1})
	require.NoError(t, err)
	shas := map[string]string{}
	for name, s := range a2redis.Scripts {
		sum := sha1.Sum([]byte(s.Source))
		shas[hex.EncodeToString(sum[:])] = name
		require.NoError(t, client.Do(ctx, client.B().ScriptLoad().Script(s.Source).Build()).Error())
	}

	const session, perEvent, perBatch = "big", 10, 1000
	built := time.Now()
	// Event heads: ten consumers per event, 1000 events (10,000 heads) per
	// append; then lane cursors, ten per event.
	for done := 0; done < heads; done += perEvent * perBatch {
		batch := make([]a2redis.Event, perBatch)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t"}
			for c := range perEvent {
				batch[i].Targets = append(batch[i].Targets, a2redis.Target{Consumer: fmt.Sprintf("c%d", c)})
			}
		}
		_, err := store.Append(ctx, session, batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	for done := 0; done < lanes; done += perEvent * perBatch {
		batch := make([]a2redis.Event, perBatch)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t"}
			for c := range perEvent {
				batch[i].Targets = append(batch[i].Targets, a2redis.Target{Consumer: "lc", Lane: fmt.Sprintf("l%d", done+i*perEvent+c)})
			}
		}
		_, err := store.Append(ctx, session, batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	// Dead letters: claims of 10,000 that lapse and are taken over at
	// MaxFailures 1, which dead-letters them.
	for done := 0; done < deadLetters; done += redisstore.DefaultMaxBatch {
		claim := redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: redisstore.DefaultMaxBatch}
		r, err := store.ClaimAvailable(ctx, claim)
		require.NoError(t, err)
		require.Len(t, r.Heads, redisstore.DefaultMaxBatch)
		clock.Advance(2 * time.Minute)
		claim.MaxFailures = 1
		r, err = store.ClaimAvailable(ctx, claim)
		require.NoError(t, err)
		require.Len(t, r.DeadLettered, redisstore.DefaultMaxBatch)
	}
	mem, _ := client.Do(ctx, client.B().Arbitrary("MEMORY", "STATS").Build()).AsStrMap()
	t.Logf("built %d event heads, %d lane cursors, %d dead letters in %v (used_memory %s)",
		heads, lanes, deadLetters, time.Since(built).Round(time.Second), mem["dataset.bytes"])
	slowest(t, ctx, client, shas)

	report := func(op string, script string, run func()) {
		t.Helper()
		start := time.Now()
		run()
		wall := time.Since(start)
		times := slowest(t, ctx, client, shas)
		s := times[script]
		require.NotNil(t, s, "%s ran no %s script", op, script)
		t.Logf("%-34s %-14s %6d calls, longest %8v, total %9v (wall %v)", op, script, s.calls, s.max, s.total, wall.Round(time.Millisecond))
		for _, other := range times {
			if other.name != script && other.max > 5*time.Millisecond {
				t.Logf("%-34s %-14s %6d calls, longest %8v", "", other.name, other.calls, other.max)
			}
		}
	}
	report("Cursors", "cursors", func() {
		cursors, err := store.Cursors(ctx, session)
		require.NoError(t, err)
		require.Len(t, cursors, heads+lanes)
	})
	report("DeadLetters", "dead_letters", func() {
		dead, err := store.DeadLetters(ctx, session)
		require.NoError(t, err)
		require.Len(t, dead, deadLetters)
	})
	var claimed redisstore.ClaimResult
	report("ClaimAvailable (default limit)", "claim_fast", func() {
		claimed, err = store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed.Heads, redisstore.DefaultClaimLimit)
	})
	report("CompleteAttempts (256)", "complete_fast", func() {
		done := make([]redisstore.Completion, len(claimed.Heads))
		for i, h := range claimed.Heads {
			done[i] = redisstore.Completion{Head: h.Ref(), Attempt: h.Attempts}
		}
		_, err := store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done})
		require.NoError(t, err)
	})
	report("Append (100 plain events)", "append_plain", func() {
		batch := make([]a2redis.Event, 100)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t"}
		}
		_, err := store.Append(ctx, session, batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	})
	report("Clear + Reclaim", "reclaim", func() {
		_, err := store.Clear(ctx, session, redisstore.ClearOptions{})
		require.NoError(t, err)
		r, err := store.Reclaim(ctx, session)
		require.NoError(t, err)
		require.True(t, r.Done)
	})
}
