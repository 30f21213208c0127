package redisstore_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
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
// inside scripts included), less the INFO and CONFIG calls themselves, and
// less the failed EVALSHA calls (the NOSCRIPT of a script's first call,
// which Valkey counts among the calls and Redis 7.0 does not).
func commandStats(ctx context.Context, tb testing.TB, c rueidis.Client) map[string]int64 {
	tb.Helper()
	out := commandStatsAll(ctx, tb, c)
	for name := range out {
		// SCRIPT LOAD runs once per script, after the NOSCRIPT of its first
		// EVALSHA; EVAL only for the key-locking probe.
		// Connection set-up (HELLO, CLIENT …) is not per-operation work.
		if name == "info" || name == "eval" || name == "script|load" || name == "hello" || name == "ping" ||
			strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") {
			delete(out, name)
		}
	}
	if failed := failedCalls(ctx, tb, c, "evalsha"); failed > 0 {
		out["evalsha"] -= failed
	}
	return out
}

// failedCalls returns INFO commandstats' failed_calls of command.
func failedCalls(ctx context.Context, tb testing.TB, c rueidis.Client, command string) int64 {
	tb.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(tb, err)
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "failed_calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(tb, err)
				return n
			}
		}
	}
	return 0
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
	// The consumer registry's refresh (one GET per ConsumerRefresh while
	// the store is used; TestConsumerRefreshCost measures it) is off here,
	// so the counts are the operations' own whatever the machine's speed.
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds", ConsumerRefresh: -1})
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
	watchSession(t, s, "followed")
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
	// The write that settles the session (its last completion) rebuilds
	// it to its size in the same call (complete_fast, the only script
	// here with an XLEN; Config.NoCompaction turns it off).
	assert.Equal(t, int64(ops/100), stats["xlen"], "one rebuild per settle")
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
		done := make([]redisstore.Attempt, len(cl.Heads))
		for i, h := range cl.Heads {
			done[i] = redisstore.AttemptOf(h)
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
	assert.Equal(t, float64(events+2*events/16), float64(stats["evalsha"]-stats["hget"]), "one script per append, one per claim, one per 16 completions (which rebuilds the session it settles)")
	assert.Equal(t, int64(3*events/16), stats["hget"], "three index updates per round: due, held, settled")
	assert.Equal(t, int64(events/16), stats["xlen"], "one rebuild per settle, in the completing call")

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
		r, err := s.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: "ordered", Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}}, redisstore.NextClaim{Holder: "w", TTL: time.Minute})
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
	assert.Equal(t, int64(1), stats["xlen"], "one rebuild check, in the last completion: the lane is done")

	// A typed log consumer as the worker runs it: its first head claimed,
	// then each head completed and the cursor's next head (the next event
	// of its type, from the type's index) claimed in the same call
	// (CompleteAndClaim: complete_fast), with the served list naming the
	// log (as the worker's does) and without it (the cursor's record names
	// its types). One of two appended events is its type.
	typedLog := []a2redis.Consumer{{Name: "typed", Log: &a2redis.LogSpec{Lane: "tl", Types: []string{"placed"}}}}
	for _, consumers := range [][]a2redis.Consumer{typedLog, nil} {
		session := fmt.Sprintf("typed-%d", len(consumers))
		for range 2 * ops / 100 {
			batch := make([]a2redis.Event, 100)
			for i := range batch {
				batch[i] = a2redis.Event{Type: "placed"}
				if i%2 == 1 {
					batch[i].Type = "viewed"
				}
			}
			_, err = s.Append(ctx, session, batch, redisstore.AppendOptions{Consumers: typedLog})
			require.NoError(t, err)
		}
		cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Consumers: typedLog, Limit: 1})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1)
		head := cl.Heads[0]
		resetStats(ctx, t, c)
		for done := 0; ; done++ {
			r, err := s.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}, Consumers: consumers},
				redisstore.NextClaim{Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, redisstore.Completed, r.Results[0].Outcome)
			if r.Next.Outcome != redisstore.Claimed {
				require.Equal(t, ops-1, done)
				break
			}
			require.Len(t, r.Next.Heads, 1)
			head = r.Next.Heads[0]
			require.Equal(t, "placed", head.Type, "the next head comes with its event")
			require.Equal(t, int64(1), head.Attempts)
		}
		stats = commandStats(ctx, t, c)
		total, list = perOp(stats, ops)
		t.Logf("typed log consumer (served %v), complete and claim next, per processed event: %.2f commands: %s", consumers, total, list)
		// Per event, one complete_fast: MGET (bounds), HMGET (the row's
		// fences), GET (the typed registry), ZRANGEBYSCORE (the next event
		// of the type), XRANGE (that event, sent along), HSET ×3 (the
		// completed row, the claimed row, the cursor record), HDEL (the
		// claim's columns), ZADD (the cursor's score: held by the claim).
		// Without the served spec the record's types are read (HGET). The
		// last completion finds no next event (no ZRANGEBYSCORE: the
		// index's last entry is the head; no XRANGE, no ZADD), the cursor
		// goes idle (ZREM, DEL live: its count of 0 is no key), its consumer's count of heads in
		// flight drops to zero (HINCRBY, HDEL: a completion that claims
		// the next head leaves it as it was, and writes none) and the
		// session settles: its listed record (SET) and one index update
		// (ready_index: HGET, ZREM); the last completion checks the
		// settled session's rebuild (XLEN finds 200 entries, past the
		// bounds: nothing written).
		// Before (complete_many, then a claim, two index updates per
		// event): 4.00 script calls and 27.95 commands per event (28.95
		// without the served spec).
		want := map[string]int64{"evalsha": ops + 1, "mget": ops, "hmget": ops, "get": ops, "zrangebyscore": ops - 1, "xrange": ops - 1,
			"hset": 3 * ops, "hdel": ops + 1, "zadd": ops - 1, "zrem": 2, "set": 1, "del": 1, "hget": 1, "hincrby": 1, "xlen": 1}
		if consumers == nil {
			want["hget"] += ops
		}
		assert.Equal(t, want, stats, "a typed log consumer, complete and claim next (served %v)", consumers)
	}

	// A log consumer's head: one claim and one completion script, whether
	// the completion names the served log or only follows a claim.
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
		runs := scripts.All()["complete_fast"].Runs()
		r, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: "logged", Head: cl.Heads[0].Ref(), Attempt: cl.Heads[0].Attempts, Consumers: consumers})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, r.Outcome)
		st := commandStats(ctx, t, c)
		assert.Equal(t, int64(1), scripts.All()["complete_fast"].Runs()-runs, "the flat complete_fast takes a log head (served %v)", consumers)
		assert.Equal(t, int64(2), st["evalsha"], "one script for a log head's completion and one index update: the session has nothing left (served %v)", consumers)
		// The index update reads its version (HGET); without the served
		// spec the completion reads the cursor's types (HGET).
		wantHGet := int64(1)
		if consumers == nil {
			wantHGet++
		}
		assert.Equal(t, wantHGet, st["hget"], "served %v", consumers)
	}

	// ClaimNext over an index of 8, 64 and 256 shards: one session with
	// 5,000 heads, claims of 16 that leave work behind, the clock 1 ms
	// later each call (so each claim moves the session behind the others:
	// one index update). Its reads do not grow with the shards: 8 shard
	// reads a call (one ZRANGE each), the claim script, the index update.
	// (A store that did not write the work learns the shards in its first
	// calls: TestReadyIndexAtScale.)
	var next []map[string]int64
	for _, shards := range []int{8, 64, 256} {
		prefix := fmt.Sprintf("cmds-next%d", shards)
		clock := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
		r, err := redisstore.New(ctx, c, redisstore.Config{Prefix: prefix, ReadyShards: shards, Clock: clock.Now, ConsumerRefresh: -1})
		require.NoError(t, err)
		for range 5000 / redisstore.DefaultMaxBatch {
			batch := make([]a2redis.Event, redisstore.DefaultMaxBatch)
			for i := range batch {
				batch[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
			}
			_, err = r.Append(ctx, "next", batch, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		resetStats(ctx, t, c)
		for range ops {
			clock.Advance(time.Millisecond)
			res, err := r.ClaimNext(ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Limit: 16})
			require.NoError(t, err)
			require.Equal(t, redisstore.Claimed, res.Outcome)
			require.Len(t, res.Heads, 16)
		}
		stats = commandStats(ctx, t, c)
		total, list = perOp(stats, ops)
		t.Logf("ClaimNext at %d shards, claims of 16: %.2f commands per call: %s", shards, total, list)
		next = append(next, stats)
	}
	assert.Equal(t, int64(8*ops), next[0]["zrange"], "one read of each of the 8 shards a call")
	assert.Equal(t, next[0], next[1], "ClaimNext at 64 shards costs what it costs at 8")
	assert.Equal(t, next[0], next[2], "ClaimNext at 256 shards costs what it costs at 8")
	backlogScans(ctx, t, c, s)
	featureCosts(ctx, t, c)
}

// backlogScans: an append to a session holding 5,000 live heads of a
// consumer the appending store does not serve reads at most
// PendingScan/PendingPage pages of the runnable set to tell whether a
// served consumer has a live head, and answers HasPending the same
// ("maybe": true), on every append path, flat or general.
func backlogScans(ctx context.Context, t *testing.T, c rueidis.Client, s *redisstore.Store) {
	t.Helper()
	const backlog = 5000
	for range backlog / 500 {
		batch := make([]a2redis.Event, 500)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "retired"}}}
		}
		_, err := s.Append(ctx, "backlog", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	served, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds", Consumers: []a2redis.Consumer{{Name: "served"}}})
	require.NoError(t, err)
	pages := int64(scripts.PendingScan / scripts.PendingPage)
	paths := []struct {
		name   string
		script string
		events []a2redis.Event
	}{
		{"1 event", "append_one", []a2redis.Event{{Type: "t"}}},
		{"1 event targeting an unserved consumer", "append_targeted", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "other"}}}}},
		{"2 events", "append_plain", []a2redis.Event{{Type: "t"}, {Type: "t"}}},
		{"a lane target of an unserved consumer", "append", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "other", Lane: "x"}}}}},
	}
	for _, general := range []bool{false, true} {
		scripts.SetGeneralOnly(general)
		for _, p := range paths {
			script := p.script
			if general {
				script = "append"
			}
			runs := scripts.All()[script].Runs()
			resetStats(ctx, t, c)
			r, err := served.Append(ctx, "backlog", p.events, redisstore.AppendOptions{})
			require.NoError(t, err)
			st := commandStats(ctx, t, c)
			t.Logf("backlog of %d unserved heads, %s (%s): %d ZREVRANGEBYSCORE", backlog, p.name, script, st["zrevrangebyscore"])
			assert.Equal(t, int64(1), scripts.All()[script].Runs()-runs, "%s went through %s", p.name, script)
			assert.Equal(t, pages, st["zrevrangebyscore"], "pending scan of %s (%s)", p.name, script)
			assert.True(t, r.HasPending, "HasPending of %s (%s): past the scan's bound it answers maybe", p.name, script)
		}
	}
	scripts.SetGeneralOnly(false)
}
