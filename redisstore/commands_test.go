package redisstore_test

import (
	"context"
	"fmt"
	"sort"
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

// privateServer starts a redis-server of this test's own, so server-wide
// statistics (INFO commandstats) count only this test's commands.
func privateServer(tb testing.TB) rueidis.Client {
	tb.Helper()
	addr, _ := redistest.Spawn(tb)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c
}

// commandStatsAll returns INFO commandstats' calls per command, every
// command included.
func commandStatsAll(ctx context.Context, tb testing.TB, c rueidis.Client) map[string]int64 {
	tb.Helper()
	out, err := redistest.CommandCalls(ctx, c)
	require.NoError(tb, err)
	return out
}

// commandStats returns INFO commandstats' calls per command (commands run
// inside scripts included), less the INFO and CONFIG calls themselves.
func commandStats(ctx context.Context, tb testing.TB, c rueidis.Client) map[string]int64 {
	tb.Helper()
	out := commandStatsAll(ctx, tb, c)
	for name := range out {
		// EVAL runs once per script: the NOSCRIPT fallback of its first
		// EVALSHA (and the key-locking probe).
		// Connection set-up (HELLO, CLIENT …) is not per-operation work.
		if name == "info" || name == "eval" || name == "hello" || name == "ping" ||
			strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") {
			delete(out, name)
		}
	}
	return out
}

func resetStats(ctx context.Context, tb testing.TB, c rueidis.Client) {
	tb.Helper()
	require.NoError(tb, c.Do(ctx, c.B().ConfigResetstat().Build()).Error())
}

// perOp divides counts by ops and renders them sorted, with the total.
func perOp(stats map[string]int64, ops int) (float64, string) {
	names := make([]string, 0, len(stats))
	var total int64
	for name, n := range stats {
		names = append(names, name)
		total += n
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s=%.2f", name, float64(stats[name])/float64(ops))
	}
	return float64(total) / float64(ops), strings.Join(parts, " ")
}

// Exact Redis command counts per operation (INFO commandstats, commands run
// inside scripts included). Not timing: these are stable.
func TestCommandsPerOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds"})
	require.NoError(t, err)
	const ops = 200

	resetStats(ctx, t, c)
	for range ops {
		_, err := s.Append(ctx, "untargeted", []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`)}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	stats := commandStats(ctx, t, c)
	total, list := perOp(stats, ops)
	t.Logf("untargeted 1-event append: %.2f commands: %s", total, list)
	// One script call (append_one: one MGET, the XADD, one MSET) and no
	// wake-up: nobody follows the session.
	assert.Equal(t, map[string]int64{"evalsha": ops, "mget": ops, "xadd": ops, "mset": ops}, stats, "an append to a session nobody follows")

	// The same while a reader follows the session: and one PUBLISH.
	watchSession(t, c, "cmds", "followed")
	resetStats(ctx, t, c)
	for range ops {
		_, err := s.Append(ctx, "followed", []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`)}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	stats = commandStats(ctx, t, c)
	assert.Equal(t, map[string]int64{"evalsha": ops, "mget": ops, "xadd": ops, "mset": ops, "publish": ops}, stats, "an append to a followed session")

	// A 1-event append targeting an event cursor (append_targeted): one
	// script call with MGET, XADD, ZADD (the new head) and MSET inside; the
	// first also lists the session due: its listed record (SET) and one
	// index update on the shard (ready_index: a script call reading the
	// shard's version with HGET, writing it, listing the session and
	// announcing it on the work channel).
	resetStats(ctx, t, c)
	for range ops {
		_, err := s.Append(ctx, "targeted", []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`), Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	stats = commandStats(ctx, t, c)
	t.Logf("targeted 1-event appends: %v", stats)
	assert.Equal(t, map[string]int64{"evalsha": ops + 1, "mget": ops, "xadd": ops, "zadd": ops + 1, "mset": ops, "set": 1, "hget": 1, "hset": 1, "publish": 1}, stats, "targeted appends")

	// Append + claim + complete through an event cursor, claims amortized
	// over a batch of 100 heads.
	resetStats(ctx, t, c)
	for round := range ops / 100 {
		batch := make([]a2redis.Event, 100)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", Payload: []byte(`{"n":1}`), Targets: []a2redis.Target{{Consumer: "c"}}}
		}
		for i := range batch {
			_, err := s.Append(ctx, "cycle", batch[i:i+1], redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "cycle", Holder: "w", TTL: time.Minute, Limit: 100})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 100, "round %d", round)
		for _, h := range cl.Heads {
			r, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "cycle", Head: h.Ref(), Attempt: h.Attempts})
			require.NoError(t, err)
			require.Equal(t, redisstore.Completed, r.Outcome)
		}
	}
	stats = commandStats(ctx, t, c)
	total, list = perOp(stats, ops)
	t.Logf("append + claim + complete per event (claims of 100): %.2f commands: %s", total, list)
	assert.LessOrEqual(t, total, 15.0)
	// Per round of 100: the first append lists the session due, the claim
	// lists it held until the lease ends, the last completion unlists it.
	// Each index update is one script call on the session's shard, with
	// one HGET inside (nothing else here reads a hash field alone).
	assert.Equal(t, int64(3*ops/100), stats["hget"], "index updates")
	assert.LessOrEqual(t, float64(stats["evalsha"]-stats["hget"])/ops, 2.0+0.01)

	// The same with the heads of each claim of 16 completed together.
	resetStats(ctx, t, c)
	for range ops / 16 {
		for range 16 {
			_, err := s.Append(ctx, "together", []a2redis.Event{{Type: "t", Payload: []byte(`{"n":1}`), Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "together", Holder: "w", TTL: time.Minute, Limit: 16})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 16)
		done := make([]redisstore.Completion, len(cl.Heads))
		for i, h := range cl.Heads {
			done[i] = redisstore.Completion{Head: h.Ref(), Attempt: h.Attempts}
		}
		res, err := s.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: "together", Attempts: done})
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, redisstore.Completed, r.Outcome)
		}
	}
	events := ops / 16 * 16
	stats = commandStats(ctx, t, c)
	total, list = perOp(stats, events)
	t.Logf("append + claim of 16 + CompleteAttempts of 16, per event: %.2f commands: %s", total, list)
	assert.LessOrEqual(t, total, 15.0)
	assert.Equal(t, float64(events+2*events/16), float64(stats["evalsha"]-stats["hget"]), "one script per append, one per claim, one per 16 completions")
	assert.Equal(t, int64(3*events/16), stats["hget"], "three index updates per round: due, held, settled")

	// A strictly ordered lane, its heads completed and the next claimed in
	// one call (CompleteAndClaim): one script call per event, plus the
	// index updates of the lane going held → held (none: the lease's end
	// only moves with the clock, which stands still here) and, at the end,
	// settled.
	lane := make([]a2redis.Event, ops)
	for i := range lane {
		lane[i] = a2redis.Event{Type: "t", Payload: []byte(`{"n":1}`), Targets: []a2redis.Target{{Consumer: "o", Lane: "acct"}}}
	}
	_, err = s.Append(ctx, "ordered", lane, redisstore.AppendOptions{})
	require.NoError(t, err)
	cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "ordered", Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, cl.Heads, 1)
	head := cl.Heads[0]
	resetStats(ctx, t, c)
	for done := 0; ; done++ {
		r, err := s.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: "ordered", Attempts: []redisstore.Completion{{Head: head.Ref(), Attempt: head.Attempts}}}, redisstore.NextClaim{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, r.Results[0].Outcome)
		if r.Next.Outcome != redisstore.Claimed {
			require.Equal(t, ops-1, done)
			break
		}
		head = r.Next.Heads[0]
	}
	stats = commandStats(ctx, t, c)
	total, list = perOp(stats, ops)
	t.Logf("ordered lane, complete and claim next, per event: %.2f commands: %s", total, list)
	assert.Equal(t, int64(ops), stats["evalsha"]-stats["hget"], "one script call per event")
	assert.Equal(t, int64(1), stats["hget"], "one index update: the lane is done")

	// A log consumer's head: one claim and one completion script, whether
	// the completion names the served log or only follows a claim (the
	// flat complete_fast never takes log heads; it is not tried on them).
	served := []a2redis.Consumer{{Name: "audit", Log: &a2redis.LogSpec{Lane: "log"}}}
	_, err = s.Append(ctx, "logged", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)
	for _, consumers := range [][]a2redis.Consumer{served, nil} {
		_, err := s.Append(ctx, "logged", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{Consumers: served})
		require.NoError(t, err)
		cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "logged", Holder: "w", TTL: time.Minute, Consumers: served, Limit: 1})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1)
		resetStats(ctx, t, c)
		r, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "logged", Head: cl.Heads[0].Ref(), Attempt: cl.Heads[0].Attempts, Consumers: consumers})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, r.Outcome)
		st := commandStats(ctx, t, c)
		assert.Equal(t, int64(1), st["evalsha"]-st["hget"], "one script for a log head's completion (served %v)", consumers)
		assert.Equal(t, int64(1), st["hget"], "and one index update: the session has nothing left")
	}
}
