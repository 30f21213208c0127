package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// A scheduled event (Event.NotBefore) takes its index at once; its
// event-cursor head is held until then, counting no failure, while other
// heads run; the ready index lists the session at that time; the stored
// event and a replay of its append carry the time.
func TestScheduledEventCursorHead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		at := e.clock.Now().Add(time.Minute)
		events := []a2redis.Event{
			{ID: "later", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}, NotBefore: at},
			{ID: "now", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},
		}
		res, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, []int64{res.Events[0].Index, res.Events[1].Index}, "the log stays dense and ordered")
		require.Equal(t, at.UnixMilli(), res.Events[0].NotBefore.UnixMilli())
		require.True(t, res.Events[1].NotBefore.IsZero())
		e.requireDue("s", "the unscheduled head is free")

		claim := func() redisstore.ClaimResult {
			t.Helper()
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: 10 * time.Second})
			require.NoError(t, err)
			return c
		}
		c := claim()
		require.Len(t, c.Heads, 1, "only the unscheduled head is claimable")
		require.Equal(t, int64(2), c.Heads[0].Index)
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, done.Outcome)
		c = claim()
		require.Equal(t, redisstore.Busy, c.Outcome)
		require.Equal(t, at.UnixMilli(), c.RetryAt.UnixMilli())
		// The completion leaves the claim's earlier end listed (early is
		// safe): once it passed, ClaimNext finds the session busy and lists
		// it from its true state.
		e.clock.Advance(10 * time.Second)
		next, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: 10 * time.Second})
		require.NoError(t, err)
		require.Equal(t, redisstore.Busy, next.Outcome)
		e.requireHeld("s", at, "the scheduled head is listed at its time")

		e.clock.Advance(50*time.Second - time.Millisecond)
		require.Equal(t, redisstore.Busy, claim().Outcome, "a millisecond early")
		e.clock.Advance(time.Millisecond)
		e.requireDue("s", "its time has come")
		c = claim()
		require.Len(t, c.Heads, 1)
		h := c.Heads[0]
		require.Equal(t, int64(1), h.Index)
		require.Equal(t, int64(1), h.Attempts)
		require.Equal(t, int64(0), h.Failures, "a scheduled hold is no failure")
		require.Equal(t, at.UnixMilli(), h.NotBefore.UnixMilli(), "the claimed event carries its time")

		replay, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.True(t, replay.Replayed, "idempotent like every append")
		require.Equal(t, at.UnixMilli(), replay.Events[0].NotBefore.UnixMilli())
		log, err := e.store.Read(e.ctx, "s", 0, 2)
		require.NoError(t, err)
		require.Equal(t, at.UnixMilli(), log[0].NotBefore.UnixMilli())
		require.True(t, log[1].NotBefore.IsZero())
	})
}

// A lane waits behind a scheduled head (strict order), whether the head is
// the lane's first or comes up after a completion — a complete-and-claim
// does not take it early — while another lane runs on.
func TestScheduledLaneHeadHoldsTheLane(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		at := e.clock.Now().Add(30 * time.Second)
		x := []a2redis.Target{{Consumer: "c", Lane: "x"}}
		y := []a2redis.Target{{Consumer: "c", Lane: "y"}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "t", Targets: x},                                            // 1
			{Type: "t", Targets: x, NotBefore: at},                             // 2: behind 1, scheduled
			{Type: "t", Targets: x},                                            // 3: behind 2
			{Type: "t", Targets: y, NotBefore: at},                             // 4: y's first head, scheduled
			{Type: "t", Targets: y},                                            // 5
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "z"}}}, // 6: another lane
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Hour})
		require.NoError(t, err)
		var got []int64
		for _, h := range c.Heads {
			got = append(got, h.Index)
		}
		require.Equal(t, []int64{1, 6}, got, "lane y waits behind its scheduled head; x and z run")

		var lane1 a2redis.HeadEvent
		for _, h := range c.Heads {
			if h.Index == 1 {
				lane1 = h
			}
		}
		next, err := e.store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(lane1)}},
			redisstore.NextClaim{Holder: "w", TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, next.Results[0].Outcome)
		require.Empty(t, next.Next.Heads, "the lane's next head is scheduled: not claimed early")
		busy, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, redisstore.Busy, busy.Outcome)

		e.clock.Advance(30 * time.Second)
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Hour})
		require.NoError(t, err)
		got = got[:0]
		for _, h := range c.Heads {
			got = append(got, h.Index)
			require.Equal(t, int64(0), h.Failures)
		}
		require.Equal(t, []int64{2, 4}, got, "both scheduled heads, at their time")
	})
}

// A bad schedule is refused before anything is written.
func TestScheduledEventValidation(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for name, ev := range map[string]a2redis.Event{
			"no targets":   {Type: "t", NotBefore: e.clock.Now().Add(time.Minute)},
			"before 1970":  {Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}, NotBefore: time.UnixMilli(-5)},
			"out of range": {Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}, NotBefore: time.UnixMilli(1 << 50)},
		} {
			_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "ok"}, ev}, redisstore.AppendOptions{})
			require.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%s: %v", name, err)
		}
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		require.Equal(t, int64(0), b.Head, "nothing was written")
	})
}

// What a scheduled event costs, in exact Redis commands (INFO
// commandstats): its append takes the general append script (an
// unscheduled one takes append_targeted), which publishes the session's
// wake-up, and its head, once due, the general claim (claim_fast hands a
// session with an ended hold to claim).
func TestCommandsPerScheduledEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ck := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: "cmds", ConsumerRefresh: -1, Clock: ck.Now})
	require.NoError(t, err)
	const ops = 100
	target := []a2redis.Target{{Consumer: "c"}}
	// extra: what the scheduled case costs above the unscheduled one.
	extra := func(base, got map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for name, n := range got {
			if d := n - base[name]; d != 0 {
				out[name] = d
			}
		}
		for name, n := range base {
			if _, ok := got[name]; !ok {
				out[name] = -n
			}
		}
		return out
	}
	var appends, claims []map[string]int64
	for _, scheduled := range []bool{false, true} {
		name := "unscheduled"
		if scheduled {
			name = "scheduled"
		}
		resetStats(ctx, t, c)
		for i := range ops {
			ev := a2redis.Event{Type: "t", Payload: []byte(`{"n":1}`), Targets: target}
			if scheduled {
				ev.NotBefore = ck.Now().Add(time.Minute)
			}
			_, err := s.Append(ctx, fmt.Sprintf("%s-%d", name, i), []a2redis.Event{ev}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		stats := commandStats(ctx, t, c)
		appends = append(appends, stats)
		total, list := perOp(stats, ops)
		t.Logf("%s 1-event append (event-cursor target, a new session each): %.2f commands: %s", name, total, list)
	}
	// The ready mark reads the runnable set's first head (no free head
	// came), and the shard announces the session's new future time on its
	// work channel (an unscheduled first head is announced as due; here
	// the general append's session wake-up is the other PUBLISH).
	require.Equal(t, map[string]int64{"zrangebyscore": ops, "publish": ops}, extra(appends[0], appends[1]), "a scheduled append's extra commands")
	ck.Advance(time.Minute)
	for _, name := range []string{"unscheduled", "scheduled"} {
		resetStats(ctx, t, c)
		for i := range ops {
			cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: fmt.Sprintf("%s-%d", name, i), Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, cl.Heads, 1)
		}
		stats := commandStats(ctx, t, c)
		claims = append(claims, stats)
		total, list := perOp(stats, ops)
		t.Logf("claim of one %s head: %.2f commands: %s", name, total, list)
	}
	// claim_fast sees an ended hold and hands over to claim (one more
	// script call, its bounds' MGET and its held-head scan).
	require.Equal(t, map[string]int64{"evalsha": ops, "mget": ops, "zrangebyscore": ops}, extra(claims[0], claims[1]), "a scheduled head's claim's extra commands")
}

// A handler's returned events may be scheduled: the completion appends them
// with their heads held until their time, and reports the time.
func TestScheduledEventsReturnedByACompletion(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		at := e.clock.Now().Add(time.Hour)
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1,
			Events: []a2redis.Event{{Type: "later", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}, NotBefore: at}}})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, done.Outcome)
		require.Equal(t, at.UnixMilli(), done.Events[0].NotBefore.UnixMilli())
		busy, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Busy, busy.Outcome, "the returned event's lane head waits for its time")
		require.Equal(t, at.UnixMilli(), busy.RetryAt.UnixMilli())
		e.clock.Advance(time.Hour)
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		require.Equal(t, int64(2), c.Heads[0].Index)
		require.Equal(t, at.UnixMilli(), c.Heads[0].NotBefore.UnixMilli())
	})
}

// TestScheduledHeadsPinSnapshots: a scheduled head is live, so it pins a
// snapshot as an unscheduled one does (its runnable score is HELD + its
// time, not its index; found by the differential test, seed 25).
func TestScheduledHeadsPinSnapshots(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ck := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
			s, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t), Clock: ck.Now})
			require.NoError(t, err)
			_, err = s.Append(ctx, "s", []a2redis.Event{
				{Type: "b", Targets: []a2redis.Target{{Consumer: "c2"}}},
				{Type: "c", NotBefore: ck.Now().Add(time.Minute), Targets: []a2redis.Target{{Consumer: "c1", Lane: "x"}, {Consumer: "c1"}}},
			}, redisstore.AppendOptions{})
			require.NoError(t, err)
			for _, pin := range []a2redis.HeadRef{{Consumer: "c1", Lane: "x", Index: 2}, {Consumer: "c1", Index: 2}} {
				reducer := "r-" + pin.Lane
				require.NoError(t, s.PutSnapshots(ctx, "s", reducer, []redisstore.SnapshotWrite{{Index: 0, State: json.RawMessage(`{"v":0}`), Pins: []a2redis.HeadRef{pin}}}))
				require.NoError(t, s.PutSnapshots(ctx, "s", reducer, []redisstore.SnapshotWrite{{Index: 2, State: json.RawMessage(`{"v":2}`)}}))
				st, err := s.ReadState(ctx, "s", reducer, redisstore.ReadStateOptions{Through: 1})
				require.NoError(t, err)
				require.JSONEq(t, `{"v":0}`, string(st.Snapshot), "the scheduled head %+v keeps the snapshot it pins", pin)
			}
		})
	}
}
