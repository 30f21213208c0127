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
	"github.com/a2redis/a2redis/redisstore"
)

// serverUsec returns INFO commandstats' total usec over every command.
func serverUsec(ctx context.Context, t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") || strings.HasPrefix(line, "cmdstat_config") {
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
// and server time per call over 100, 10,000 and 100,000 sessions of which
// 10 have work, and the repair's cost over 10,000 sessions with work.
// Commands are exact and must not grow with the sessions; times are
// reported.
func TestReadyIndexAtScale(t *testing.T) {
	if os.Getenv("A2REDIS_SCALE") == "" {
		t.Skip("set A2REDIS_SCALE=1 to measure the ready index at scale")
	}
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var perCall []float64
	for _, n := range []int{100, 10_000, 100_000} {
		s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: fmt.Sprintf("scale%d", n), PublishWait: -1})
		require.NoError(t, err)
		// n-10 sessions with history and no work, 10 with work.
		errs := make(chan error, 64)
		sem := make(chan struct{}, 64)
		for i := range n - 10 {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				_, err := s.Append(ctx, fmt.Sprintf("idle-%d", i), []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
				if err != nil {
					errs <- err
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
		const withWork, perSession = 10, 1000
		for i := range withWork {
			batch := make([]a2redis.Event, perSession)
			for j := range batch {
				batch[j] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
			}
			_, err := s.Append(ctx, fmt.Sprintf("busy-%d", i), batch, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		const calls = 200
		resetStats(ctx, t, c)
		for range calls {
			r, err := s.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, Limit: 16})
			require.NoError(t, err)
			require.Equal(t, redisstore.Claimed, r.Outcome)
			require.Len(t, r.Heads, 16)
		}
		usec := serverUsec(ctx, t, c)
		stats := commandStats(ctx, t, c)
		total, list := perOp(stats, calls)
		perCall = append(perCall, total)
		t.Logf("ClaimNext over %d sessions (10 with work), limit 16: %.2f commands per call (%s), %.1f server µs per call",
			n, total, list, float64(usec)/calls)
	}
	assert.Equal(t, perCall[0], perCall[1], "commands per ClaimNext do not grow with the sessions")
	assert.Equal(t, perCall[0], perCall[2], "commands per ClaimNext do not grow with the sessions")

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
