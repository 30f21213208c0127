package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// serverUsec returns INFO commandstats' total usec over every command.
func serverUsec(ctx context.Context, t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	return commandUsec(ctx, t, c, "")
}

// commandUsec returns INFO commandstats' usec of one command ("" for every
// command but INFO and CONFIG).
func commandUsec(ctx context.Context, t *testing.T, c rueidis.Client, command string) int64 {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") || strings.HasPrefix(line, "cmdstat_config") {
			continue
		}
		if command != "" && !strings.HasPrefix(line, "cmdstat_"+command+":") {
			continue
		}
		for _, field := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// The ready index at scale (A2REDIS_SCALE=1; minutes): ClaimNext's commands
// and server time per call at 8, 64 and 256 index shards over 100, 10,000
// and 100,000 listed sessions (10 with work claimable now, the rest held for
// an hour), read by a store of its own (a worker in another process), and
// the repair's cost over 10,000 sessions with work. Commands are exact and
// must grow neither with the sessions nor with the shards; times are
// reported.
func TestReadyIndexAtScale(t *testing.T) {
	if os.Getenv("A2REDIS_SCALE") == "" {
		t.Skip("set A2REDIS_SCALE=1 to measure the ready index at scale")
	}
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	perCall := map[string]float64{}
	for _, shards := range []int{8, 64, 256} {
		prefix := fmt.Sprintf("scale-s%d", shards)
		// A test clock, 1 ms later each call: every claim moves its
		// session behind the others (one index update), however fast.
		clock := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
		w, err := redisstore.New(ctx, c, redisstore.Config{Prefix: prefix, PublishWait: -1, ReadyShards: shards, Clock: clock.Now})
		require.NoError(t, err)
		// 10 sessions with 2,000 heads each, claimable now.
		const withWork, perSession = 10, 2000
		for i := range withWork {
			for range perSession / redisstore.DefaultMaxBatch {
				batch := make([]a2redis.Event, redisstore.DefaultMaxBatch)
				for j := range batch {
					batch[j] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
				}
				_, err := w.Append(ctx, fmt.Sprintf("busy-%d", i), batch, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
		}
		listed := withWork
		for _, n := range []int{100, 10_000, 100_000} {
			// Sessions listed held: one head each, claimed for an hour.
			errs := make(chan error, 64)
			sem := make(chan struct{}, 64)
			for i := listed; i < n; i++ {
				sem <- struct{}{}
				go func() {
					defer func() { <-sem }()
					session := fmt.Sprintf("held-%d", i)
					_, err := w.Append(ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
					if err == nil {
						var r redisstore.ClaimResult
						r, err = w.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "h", TTL: time.Hour})
						if err == nil && r.Outcome != redisstore.Claimed {
							err = fmt.Errorf("claiming %s: %v", session, r.Outcome)
						}
					}
					if err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}()
			}
			for range cap(sem) {
				sem <- struct{}{}
			}
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			listed = n
			// A store of its own: what it knows of the index comes from
			// its reads. Its first calls learn the shards; they are not
			// counted.
			s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: prefix, PublishWait: -1, ReadyShards: shards, Clock: clock.Now})
			require.NoError(t, err)
			for range shards/4 + 1 {
				clock.Advance(time.Millisecond)
				_, err := s.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, Limit: 16})
				require.NoError(t, err)
			}
			const calls = 200
			resetStats(ctx, t, c)
			for range calls {
				clock.Advance(time.Millisecond)
				r, err := s.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, Limit: 16})
				require.NoError(t, err)
				require.Equal(t, redisstore.Claimed, r.Outcome)
				require.Len(t, r.Heads, 16)
			}
			usec, reads := serverUsec(ctx, t, c), commandUsec(ctx, t, c, "zrange")
			stats := commandStats(ctx, t, c)
			total, list := perOp(stats, calls)
			perCall[fmt.Sprintf("%d/%d", shards, n)] = total
			// Exact: 8 shard reads, the claim and one index update a call.
			assert.Equal(t, int64(8*calls), stats["zrange"], "shard reads at %d shards, %d sessions", shards, n)
			assert.Equal(t, int64(2*calls), stats["evalsha"], "scripts at %d shards, %d sessions", shards, n)
			t.Logf("ClaimNext, %d shards, %d listed sessions (10 with work), limit 16: %.2f commands per call (%s), %.1f server µs per call, %.1f of them reading shards",
				shards, n, total, list, float64(usec)/calls, float64(reads)/calls)
		}
	}
	// The rest is the claim script's own reads, which differ by a few
	// hundredths where a claim crosses one of its session's chunks.
	for key, n := range perCall {
		assert.InDelta(t, perCall["8/100"], n, 0.25, "commands per ClaimNext at %s shards/sessions: they grow neither with the sessions nor with the shards", key)
	}

	// The repair over 10,000 sessions that have work.
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "repair", PublishWait: -1})
	require.NoError(t, err)
	const sessions = 10_000
	sem := make(chan struct{}, 64)
	for i := range sessions {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, _ = s.Append(ctx, fmt.Sprintf("s-%d", i), []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	for _, lost := range []bool{false, true} {
		if lost {
			for shard := range s.ReadyShards() {
				require.NoError(t, c.Do(ctx, c.B().Del().Key(fmt.Sprintf("repair:{r%d}:ready", shard), fmt.Sprintf("repair:{r%d}:ready-v", shard)).Build()).Error())
			}
		}
		resetStats(ctx, t, c)
		start := time.Now()
		st, err := s.RepairReady(ctx)
		require.NoError(t, err)
		elapsed := time.Since(start)
		usec := serverUsec(ctx, t, c)
		stats := commandStats(ctx, t, c)
		total, list := perOp(stats, 1)
		require.Equal(t, sessions, st.Sessions)
		t.Logf("RepairReady over %d sessions (index lost: %v): %v wall, %d server µs, %.0f commands (%s)", sessions, lost, elapsed.Round(time.Millisecond), usec, total, list)
		if lost {
			stats, err := s.ReadyStats(ctx)
			require.NoError(t, err)
			var due int64
			for _, one := range stats {
				due += one.Due
			}
			assert.Equal(t, int64(sessions), due, "every session listed again")
		}
	}
}
