package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// flight reads a session's count of heads in flight per consumer
// (keys.Session.Flight) straight from the server.
func (e *env) flight(session string) map[string]int64 {
	e.t.Helper()
	c := e.client
	raw, err := c.Do(e.ctx, c.B().Hgetall().Key(keys.For(e.prefix, session).Flight()).Build()).AsStrMap()
	require.NoError(e.t, err)
	out := map[string]int64{}
	for k, v := range raw {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(e.t, err)
		out[k] = n
	}
	return out
}

// A consumer's PerSession limit holds across claimers: with PerSession 2,
// two holders together never have more than two of a session's heads in
// flight; a completion, failure, release or cancel frees a place; a lapsed
// claim is taken over without room; another consumer of the session is not
// held back; and the session's count in flight follows every step (the
// key is gone once nothing is in flight).
func TestPerSessionLimit(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		limited := a2redis.Consumer{Name: "c", PerSession: 2}
		other := a2redis.Consumer{Name: "o"}
		require.NoError(t, e.store.AddConsumers(e.ctx, limited, other))
		var events []a2redis.Event
		for range 6 {
			events = append(events, a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}})
		}
		events = append(events, a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "o"}, {Consumer: "c", Lane: "x"}}})
		_, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)

		claim := func(holder string, limit int) redisstore.ClaimResult {
			t.Helper()
			r, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: holder, TTL: time.Minute,
				Consumers: []a2redis.Consumer{{Name: "c"}, other}, Limit: limit, MaxFailures: 5})
			require.NoError(t, err)
			return r
		}
		indexes := func(r redisstore.ClaimResult) (out []int64) {
			for _, h := range r.Heads {
				out = append(out, h.Index)
			}
			return out
		}
		// The request's own declaration says no limit: the registry's wins.
		r := claim("w1", 1)
		require.Equal(t, []int64{1}, indexes(r))
		require.Equal(t, map[string]int64{"c": 1}, e.flight("s"))
		r2 := claim("w2", 16)
		require.Equal(t, []int64{2, 7}, indexes(r2), "one more of c (its limit is 2), and o's head, which c's limit does not hold back")
		require.Equal(t, map[string]int64{"c": 2, "o": 1}, e.flight("s"))
		busy := claim("w3", 16)
		require.Equal(t, redisstore.Busy, busy.Outcome, "c is at its limit: its free heads wait")
		require.True(t, busy.RetryAt.After(e.clock.Now()))

		// A completion frees a place.
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: r.Heads[0].Ref(), Attempt: 1})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, done.Outcome)
		r3 := claim("w3", 16)
		require.Equal(t, []int64{3}, indexes(r3))
		// A failure (held for retry, not in flight) frees one, as a release does.
		f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: r3.Heads[0].Ref(), Attempt: 1, Error: "x", MaxFailures: 5, RetryAfter: time.Hour})
		require.NoError(t, err)
		require.Equal(t, redisstore.Failed, f.Outcome)
		require.Equal(t, map[string]int64{"c": 1, "o": 1}, e.flight("s"))
		r4 := claim("w4", 16)
		require.Equal(t, []int64{4}, indexes(r4))
		_, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: []redisstore.Attempt{{Head: r4.Heads[0].Ref(), Attempt: 1}}})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"c": 1, "o": 1}, e.flight("s"))
		// A cancel of a running head frees one.
		r5 := claim("w5", 16)
		require.Equal(t, []int64{4}, indexes(r5), "the released head, again")
		_, err = e.store.Cancel(e.ctx, redisstore.CancelRequest{Session: "s", Consumer: "c", Index: 4})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"c": 1, "o": 1}, e.flight("s"))

		// The lapsed claim of head 2 is taken over without room: c is at
		// its limit once more (2 and 5).
		r6 := claim("w6", 1)
		require.Equal(t, []int64{5}, indexes(r6))
		e.clock.Advance(2 * time.Minute)
		// Every claim has lapsed now: 2, 5 (c) and 7 (o). A takeover runs
		// alone: the lowest lapsed head first.
		t1 := claim("w7", 16)
		require.Equal(t, []int64{2}, indexes(t1))
		require.Equal(t, "w7", t1.Heads[0].Holder)
		require.Equal(t, int64(2), e.flight("s")["c"], "a takeover counts the head once")

		// Finish everything: the count goes, and so does its key.
		for _, h := range t1.Heads {
			_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts})
			require.NoError(t, err)
		}
		for {
			r := claim("w8", 16)
			if r.Outcome != redisstore.Claimed {
				break
			}
			for _, h := range r.Heads {
				_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts})
				require.NoError(t, err)
			}
			e.clock.Advance(2 * time.Hour) // the failed head's retry hold
		}
		require.Empty(t, e.flight("s"), "nothing in flight: no key")
		n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(keys.For(e.prefix, "s").Flight()).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// PerSession 1 on a consumer with lanes runs one of its heads of a session
// at a time, whatever lane; a changed setting takes effect through the
// registry; a Log consumer or a negative limit is refused before anything
// is written.
func TestPerSessionOneAcrossLanes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.NoError(t, e.store.AddConsumers(e.ctx, a2redis.Consumer{Name: "c", PerSession: 1}))
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "a"}}},
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "b"}}},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		r, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, r.Heads, 1, "one head of the session at a time")
		require.Equal(t, "a", r.Heads[0].Lane)
		again, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w2", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Busy, again.Outcome)

		// Raised to 2 in the registry: lane b runs too.
		require.NoError(t, e.store.AddConsumers(e.ctx, a2redis.Consumer{Name: "c", PerSession: 2}))
		got, _, err := e.store.ReadConsumers(e.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, got[0].PerSession)
		again, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w2", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, again.Heads, 1)
		require.Equal(t, "b", again.Heads[0].Lane)

		for _, bad := range []a2redis.Consumer{
			{Name: "c", PerSession: -1},
			{Name: "l", PerSession: 1, Log: &a2redis.LogSpec{Lane: "log"}},
		} {
			err := e.store.AddConsumers(e.ctx, bad)
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", bad)
			_, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{bad}})
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", bad)
		}
	})
}

// A consumer's MaxFailures in the registry wins over a request's: a
// failure report asking for 5 dead-letters its head at the second failure,
// a takeover of a lapsed claim at its own count too, and a Permanent
// failure dead-letters at once; a consumer with no setting keeps the
// request's.
func TestDeclaredMaxFailures(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		require.NoError(t, e.store.AddConsumers(e.ctx, a2redis.Consumer{Name: "strict", MaxFailures: 2}, a2redis.Consumer{Name: "lax"}))
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "t", Targets: []a2redis.Target{{Consumer: "strict"}, {Consumer: "lax"}}},
			{Type: "t", Targets: []a2redis.Target{{Consumer: "strict"}}},
			{Type: "t", Targets: []a2redis.Target{{Consumer: "lax"}}},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		claim := func() redisstore.ClaimResult {
			t.Helper()
			r, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, MaxFailures: 5})
			require.NoError(t, err)
			return r
		}
		fail := func(h a2redis.HeadEvent, permanent bool) redisstore.FailOutcome {
			t.Helper()
			r, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "x", MaxFailures: 5, Permanent: permanent})
			require.NoError(t, err)
			return r.Outcome
		}
		byRef := func(r redisstore.ClaimResult) map[string]a2redis.HeadEvent {
			out := map[string]a2redis.HeadEvent{}
			for _, h := range r.Heads {
				out[h.Consumer+"@"+strconv.FormatInt(h.Index, 10)] = h
			}
			return out
		}
		first := byRef(claim())
		require.Len(t, first, 4)
		require.Equal(t, redisstore.Failed, fail(first["strict@1"], false))
		require.Equal(t, redisstore.Failed, fail(first["lax@1"], false))
		require.Equal(t, redisstore.DeadLettered, fail(first["lax@3"], true), "a permanent failure")
		again := byRef(claim())
		require.Equal(t, redisstore.DeadLettered, fail(again["strict@1"], false), "the registry's 2, not the request's 5")
		require.Equal(t, redisstore.Failed, fail(again["lax@1"], false), "lax has no setting: the request's 5")

		// strict@2's claim lapses twice: its second takeover dead-letters it.
		e.clock.Advance(2 * time.Minute)
		over := claim()
		require.Len(t, over.Heads, 1)
		require.Equal(t, "strict", over.Heads[0].Consumer, "the takeover, alone")
		require.Equal(t, int64(1), over.Heads[0].Failures)
		e.clock.Advance(2 * time.Minute)
		dead := claim()
		require.Len(t, dead.DeadLettered, 1, "the second lapse reaches strict's 2")
		require.Equal(t, int64(2), dead.DeadLettered[0].Index)
	})
}
