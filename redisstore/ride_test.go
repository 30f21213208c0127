package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// A ClaimNext that takes a session's last free head does not wait for its
// ready-index update: the update rides with the store's next call to the
// session's shard, and a newer update of the session replaces it. Every
// step here is a sequential call on one shard, so what is sent is
// determined: the claim's own update never goes out before the next write
// of the shard, and ClaimNext never loses a session to it.
func TestClaimUpdatesRide(t *testing.T) {
	const ttl = time.Minute
	eachWith(t, func(c *redisstore.Config) { c.ReadyShards = 1 }, func(t *testing.T, e *env) {
		// Nothing rides out on its own here (see
		// TestRidingUpdatesGoOnTheirOwn): every step decides what is sent.
		redisstore.RideFor(e.store, time.Hour)
		other, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, Clock: e.clock.Now, ReadyShards: 1})
		require.NoError(t, err)
		appendOne := func(s *redisstore.Store, session string) {
			t.Helper()
			_, err := s.Append(e.ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			e.clock.Advance(time.Millisecond)
		}
		claimNext := func(s *redisstore.Store) redisstore.ClaimNextResult {
			t.Helper()
			r, err := s.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: ttl})
			require.NoError(t, err)
			return r
		}
		listed := func(session string) redisstore.ReadyState {
			t.Helper()
			st, err := e.store.ReadyAt(e.ctx, session)
			require.NoError(t, err)
			return st
		}

		// Claimed: the index still lists a (its update rides), yet this
		// store's next ClaimNext passes it over.
		appendOne(e.store, "a")
		r := claimNext(e.store)
		require.Equal(t, "a", r.Session)
		require.Len(t, r.Heads, 1)
		assert.True(t, listed("a").Due, "the claim's update rides: a is listed at its earlier time")
		again := claimNext(e.store)
		assert.Empty(t, again.Session, "a riding session is passed over")

		// The completion's update rides in place of the claim's: a leaves
		// the index in one update, with the store's next write of the
		// shard; meanwhile this store passes it over.
		_, err = e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "a", Attempts: []redisstore.Attempt{{Head: r.Heads[0].Ref(), Attempt: r.Heads[0].Attempts}}})
		require.NoError(t, err)
		assert.True(t, listed("a").Listed, "the completion's update rides")
		again = claimNext(e.store)
		assert.Empty(t, again.Session, "a settled riding session is passed over")
		appendOne(e.store, "b")
		assert.False(t, listed("a").Listed, "completed: a left the index with the next write")

		// A riding update goes with the store's next write of the shard.
		r = claimNext(e.store)
		require.Equal(t, "b", r.Session)
		assert.True(t, listed("b").Due)
		appendOne(e.store, "c")
		st := listed("b")
		assert.True(t, st.Listed, "b is held")
		assert.False(t, st.Due, "b is held")
		assert.Equal(t, e.clock.Now().Add(ttl-time.Millisecond).UnixMilli(), st.At.UnixMilli(), "b is listed at its claim's end")
		r = claimNext(e.store)
		require.Equal(t, "c", r.Session)

		// Another process meets a riding session at its earlier time: its
		// claim finds it busy and lists it from its true state.
		assert.True(t, listed("c").Due)
		none := claimNext(other)
		assert.Empty(t, none.Session, "c's head is held")
		assert.False(t, listed("c").Due, "the other process's claim listed c held")

		// Riding sessions listed first never hide due ones behind them:
		// twenty claimed sessions ride here while another process appends.
		for i := range 20 {
			appendOne(other, fmt.Sprintf("r%02d", i))
		}
		seen := map[string]bool{}
		for range 20 {
			r := claimNext(e.store)
			require.NotEmpty(t, r.Session)
			require.False(t, seen[r.Session], "%s claimed twice: a riding session was not passed over", r.Session)
			seen[r.Session] = true
		}
		appendOne(other, "z")
		r = claimNext(e.store)
		assert.Equal(t, "z", r.Session, "the due session behind twenty riding ones is found")

		// A claim that lapses while its update still rides: once its end
		// has passed, the session is claimed again (taken over).
		appendOne(other, "lapse")
		r = claimNext(e.store)
		require.Equal(t, "lapse", r.Session)
		e.clock.Advance(ttl + time.Second)
		r = claimNext(e.store)
		// The oldest lapsed claims come first: keep claiming until lapse's.
		for i := 0; r.Session != "lapse" && i < 30; i++ {
			require.NotEmpty(t, r.Session, "a lapsed session was passed over")
			r = claimNext(e.store)
		}
		require.Equal(t, "lapse", r.Session)
		require.Len(t, r.Heads, 1)
		assert.Equal(t, int64(2), r.Heads[0].Attempts, "taken over")
	})
}

// With the default ride time, riding updates go on their own: a session
// claimed and completed leaves the index with nothing else written.
func TestRidingUpdatesGoOnTheirOwn(t *testing.T) {
	eachWith(t, func(c *redisstore.Config) { c.ReadyShards = 1 }, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "a", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, "a", r.Session)
		_, err = e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "a", Attempts: []redisstore.Attempt{{Head: r.Heads[0].Ref(), Attempt: r.Heads[0].Attempts}}})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err := e.store.ReadyAt(e.ctx, "a")
			return err == nil && !st.Listed
		}, 30*time.Second, 5*time.Millisecond, "the riding update never went")
	})
}
