package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// featureCosts: what the flow features cost in exact Redis commands (INFO
// commandstats), beside the plain append and claim TestCommandsPerOperation
// counts (a scheduled event's costs: TestCommandsPerScheduledEvent):
//
//   - cancel: one script call per head cancelled, and nothing on the
//     appends and claims of the sessions it never touches;
//   - rate limits: a rate-limited claim takes its starts first (one
//     rate_take call: TIME, GET, SET), and gives back what it did not use
//     (one more) when it found fewer heads;
//   - pause: a claim serving only paused consumers sends nothing; one
//     serving a paused consumer beside others costs what the others' claim
//     costs; pausing is one registry write, resuming one more plus an
//     announcement per index shard;
//   - schedules: a tick's append carries an event id (the append's
//     idempotency: one more key read and written); a second process's
//     append of the same tick is a replay.
func featureCosts(ctx context.Context, t *testing.T, c rueidis.Client) {
	t.Helper()
	const ops = 100
	target := []a2redis.Target{{Consumer: "c"}}
	measure := func(what string, op func(i int)) map[string]int64 {
		t.Helper()
		resetStats(ctx, t, c)
		for i := range ops {
			op(i)
		}
		stats := commandStats(ctx, t, c)
		total, list := perOp(stats, ops)
		t.Logf("%s: %.2f commands: %s", what, total, list)
		return stats
	}
	times := func(n int64, m map[string]int64) map[string]int64 {
		out := make(map[string]int64, len(m))
		for k, v := range m {
			out[k] = v * n
		}
		return out
	}

	// Cancel of a waiting head (an event cursor's only head).
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds-cancel", ConsumerRefresh: -1})
	require.NoError(t, err)
	for i := range ops {
		_, err := s.Append(ctx, fmt.Sprintf("x%d", i), []a2redis.Event{{Type: "t", Targets: target}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	stats := measure("Cancel of a waiting head", func(i int) {
		r, err := s.Cancel(ctx, redisstore.CancelRequest{Session: fmt.Sprintf("x%d", i), Consumer: "c", Index: 1})
		require.NoError(t, err)
		require.Equal(t, redisstore.Cancelled, r.Outcome)
	})
	// The cancel script, the index update of the session settling, and the
	// settled session's rebuild (compact_log: MGET, XLEN, MEMORY USAGE,
	// DUMP and RESTORE of the log, DEL of the zero live count; a session
	// below rows.ChunkPinFrom events pinned no head chunk: none is read).
	assert.Equal(t, times(ops, map[string]int64{"evalsha": 3, "hdel": 1, "hget": 1, "hmget": 1, "hset": 2, "mget": 2, "mset": 1, "set": 1, "zrem": 2, "zscore": 1,
		"del": 1, "dump": 1, "memory|usage": 1, "restore": 1, "xlen": 1}), stats, "a cancel")

	// Rate limits: a take and a give-back.
	limit := redisstore.RateLimit{Starts: 1_000_000, Per: time.Hour}
	_, err = s.TakeStarts(ctx, "warm", limit, 1) // the script's first call (NOSCRIPT, then SCRIPT LOAD)
	require.NoError(t, err)
	var grants []redisstore.RateGrant
	stats = measure("TakeStarts", func(int) {
		g, err := s.TakeStarts(ctx, "c", limit, 16)
		require.NoError(t, err)
		grants = append(grants, g)
	})
	assert.Equal(t, times(ops, map[string]int64{"evalsha": 1, "time": 1, "get": 1, "set": 1}), stats, "a take")
	stats = measure("GiveBackStarts", func(i int) {
		require.NoError(t, s.GiveBackStarts(ctx, "c", limit, grants[i], 4))
	})
	assert.Equal(t, times(ops, map[string]int64{"evalsha": 1, "time": 1, "get": 1, "set": 1}), stats, "a give-back")

	// Pause: a store with a registry; the claims of paused consumers.
	p, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds-pause"})
	require.NoError(t, err)
	require.NoError(t, p.AddConsumers(ctx, a2redis.Consumer{Name: "c"}, a2redis.Consumer{Name: "d"}))
	both := []a2redis.Target{{Consumer: "c"}, {Consumer: "d"}}
	for i := range 2 * ops {
		_, err := p.Append(ctx, fmt.Sprintf("p%d", i), []a2redis.Event{{Type: "t", Targets: both}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	// The same head claimed for d alone with nothing paused, and for c and
	// d with c paused: one head each, c's left.
	unpaused := measure("claim of consumer d's head, nothing paused", func(i int) {
		cl, err := p.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("p%d", i), Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "d"}}})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1)
	})
	stats = measure("PauseConsumer and ResumeConsumer", func(int) {
		require.NoError(t, p.PauseConsumer(ctx, "c"))
		require.NoError(t, p.ResumeConsumer(ctx, "c"))
	})
	assert.Equal(t, times(ops, map[string]int64{"evalsha": 2, "get": 6, "set": 2, "publish": 8}), stats,
		"a pause and a resume: a registry write each (consumers_put), and the resume's announcement on each of the 8 shards")
	require.NoError(t, p.PauseConsumer(ctx, "c"))
	stats = measure("claim of consumers c (paused) and d", func(i int) {
		cl, err := p.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("p%d", ops+i), Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "c"}, {Name: "d"}}})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1)
	})
	assert.Equal(t, unpaused, stats, "a claim with a paused consumer costs what it costs with none")
	stats = measure("ClaimNext serving only paused consumer c", func(int) {
		res, err := p.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "c"}}})
		require.NoError(t, err)
		require.Empty(t, res.Heads)
	})
	assert.Empty(t, stats, "a claim of paused consumers alone sends nothing")

	// Schedules: a tick's append (an event id) and its replay.
	plain := measure("1-event targeted append, no id", func(i int) {
		_, err := s.Append(ctx, fmt.Sprintf("plain%d", i), []a2redis.Event{{Type: "t", Targets: target}}, redisstore.AppendOptions{})
		require.NoError(t, err)
	})
	tick := func(i int) []a2redis.Event {
		return []a2redis.Event{{Type: "t", ID: fmt.Sprintf("sched:%d", i), Targets: target}}
	}
	withID := measure("1-event targeted append with an id (a schedule's tick)", func(i int) {
		r, err := s.Append(ctx, fmt.Sprintf("tick%d", i), tick(i), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.False(t, r.Replayed)
	})
	replay := measure("the same append replayed (another process's tick)", func(i int) {
		r, err := s.Append(ctx, fmt.Sprintf("tick%d", i), tick(i), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.True(t, r.Replayed)
	})
	assert.Equal(t, plain, withID, "an event id costs nothing more: the append's one MGET reads its slot")
	assert.Equal(t, times(ops, map[string]int64{"evalsha": 1, "mget": 1, "xrange": 1}), replay, "a replay: one script call reading the stored row")
	record := measure("RecordSchedule", func(i int) {
		require.NoError(t, s.RecordSchedule(ctx, redisstore.ScheduleInfo{Name: "sched", Spec: "every 1m", Session: "ticks", Type: "t",
			Next: time.UnixMilli(int64(1_800_000_060_000 + i*60_000)), Last: time.UnixMilli(int64(1_800_000_000_000 + i*60_000)), By: "p", Seen: time.Now()}))
	})
	assert.Equal(t, times(ops, map[string]int64{"hset": 1, "zadd": 2}), record, "a schedule's record: its hash field, its next and last ticks")
}

// BenchmarkFeatureCosts times what the flow features cost per append and
// per claim, beside the plain operation in the same run (compare within a
// run only; `go test ./redisstore -run '^$' -bench FeatureCosts -count 3`),
// in wall time and in the server's CPU (srv-µs/op, INFO cpu):
// every op touches a session of its own (one head each), so each claim
// lists its session held and each append lists its session due, as in
// TestCommandsPerOperation's feature rows.
func BenchmarkFeatureCosts(b *testing.B) {
	c := privateServer(b)
	ctx := context.Background()
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "bench-features"})
	require.NoError(b, err)
	require.NoError(b, s.AddConsumers(ctx, a2redis.Consumer{Name: "c"}, a2redis.Consumer{Name: "d"}, a2redis.Consumer{Name: "paused"}))
	require.NoError(b, s.PauseConsumer(ctx, "paused"))
	e := &bench{ctx: ctx, client: c, store: s}
	target := []a2redis.Target{{Consumer: "c"}}
	ev := func(mod func(*a2redis.Event)) []a2redis.Event {
		e := a2redis.Event{Type: "t", Payload: benchPayload, Targets: target}
		if mod != nil {
			mod(&e)
		}
		return []a2redis.Event{e}
	}
	appendEach := func(b *testing.B, name string, mk func(i int) []a2redis.Event) {
		b.Helper()
		for i := 0; i < b.N; i++ {
			_, err := s.Append(ctx, fmt.Sprintf("%s-%d", name, i), mk(i), redisstore.AppendOptions{})
			require.NoError(b, err)
		}
	}
	appends := []struct {
		name string
		mk   func(i int) []a2redis.Event
	}{
		{"plain", func(int) []a2redis.Event { return ev(nil) }},
		{"scheduled", func(int) []a2redis.Event {
			return ev(func(e *a2redis.Event) { e.NotBefore = time.Now().Add(time.Hour) })
		}},
		{"with-id", func(i int) []a2redis.Event { return ev(func(e *a2redis.Event) { e.ID = "tick-" + strconv.Itoa(i) }) }},
	}
	for _, a := range appends {
		b.Run("append/"+a.name, func(b *testing.B) {
			name := session("a-" + a.name)
			m := e.measure(b)
			appendEach(b, name, a.mk)
			m(b.N, "op")
		})
	}
	b.Run("append/replayed", func(b *testing.B) {
		name := session("a-replayed")
		mk := func(i int) []a2redis.Event { return ev(func(e *a2redis.Event) { e.ID = "tick-" + strconv.Itoa(i) }) }
		b.StopTimer()
		appendEach(b, name, mk)
		b.StartTimer()
		m := e.measure(b)
		appendEach(b, name, mk)
		m(b.N, "op")
	})

	claimEach := func(b *testing.B, name string, consumers []a2redis.Consumer, before func()) {
		b.Helper()
		for i := 0; i < b.N; i++ {
			if before != nil {
				before()
			}
			cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("%s-%d", name, i), Holder: "w", TTL: time.Hour, Consumers: consumers})
			require.NoError(b, err)
			require.Len(b, cl.Heads, 1)
		}
	}
	b.Run("claim/plain", func(b *testing.B) {
		name := session("c-plain")
		b.StopTimer()
		appendEach(b, name, func(int) []a2redis.Event { return ev(nil) })
		b.StartTimer()
		m := e.measure(b)
		claimEach(b, name, nil, nil)
		m(b.N, "op")
	})
	b.Run("claim/scheduled-head-due", func(b *testing.B) {
		name := session("c-scheduled")
		b.StopTimer()
		due := time.Now().Add(time.Duration(b.N)*time.Millisecond + 100*time.Millisecond) // after the fill
		appendEach(b, name, func(int) []a2redis.Event {
			return ev(func(e *a2redis.Event) { e.NotBefore = due })
		})
		time.Sleep(time.Until(due) + time.Millisecond)
		b.StartTimer()
		m := e.measure(b)
		claimEach(b, name, nil, nil)
		m(b.N, "op")
	})
	b.Run("claim/two-consumers", func(b *testing.B) {
		name := session("c-two")
		b.StopTimer()
		appendEach(b, name, func(int) []a2redis.Event {
			return ev(func(e *a2redis.Event) { e.Targets = []a2redis.Target{{Consumer: "c"}, {Consumer: "d"}} })
		})
		b.StartTimer()
		m := e.measure(b)
		for i := 0; i < b.N; i++ {
			cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("%s-%d", name, i), Holder: "w", TTL: time.Hour, Consumers: []a2redis.Consumer{{Name: "c"}, {Name: "d"}}})
			require.NoError(b, err)
			require.Len(b, cl.Heads, 2)
		}
		m(b.N, "op")
	})
	b.Run("claim/beside-a-paused-consumer", func(b *testing.B) {
		name := session("c-paused")
		b.StopTimer()
		appendEach(b, name, func(int) []a2redis.Event {
			return ev(func(e *a2redis.Event) { e.Targets = []a2redis.Target{{Consumer: "c"}, {Consumer: "paused"}} })
		})
		b.StartTimer()
		m := e.measure(b)
		claimEach(b, name, []a2redis.Consumer{{Name: "c"}, {Name: "paused"}}, nil)
		m(b.N, "op")
	})
	limit := redisstore.RateLimit{Starts: 1 << 30, Per: time.Hour}
	b.Run("claim/rate-limited", func(b *testing.B) {
		name := session("c-rate")
		b.StopTimer()
		appendEach(b, name, func(int) []a2redis.Event { return ev(nil) })
		b.StartTimer()
		m := e.measure(b)
		claimEach(b, name, nil, func() {
			g, err := s.TakeStarts(ctx, "c", limit, 1)
			require.NoError(b, err)
			require.Equal(b, 1, g.Starts)
		})
		m(b.N, "op")
	})
	b.Run("cancel", func(b *testing.B) {
		name := session("cancel")
		b.StopTimer()
		appendEach(b, name, func(int) []a2redis.Event { return ev(nil) })
		b.StartTimer()
		m := e.measure(b)
		for i := 0; i < b.N; i++ {
			r, err := s.Cancel(ctx, redisstore.CancelRequest{Session: fmt.Sprintf("%s-%d", name, i), Consumer: "c", Index: 1})
			require.NoError(b, err)
			require.Equal(b, redisstore.Cancelled, r.Outcome)
		}
		m(b.N, "op")
	})
	b.Run("take-starts", func(b *testing.B) {
		m := e.measure(b)
		for i := 0; i < b.N; i++ {
			_, err := s.TakeStarts(ctx, "c", limit, 1)
			require.NoError(b, err)
		}
		m(b.N, "op")
	})
}
