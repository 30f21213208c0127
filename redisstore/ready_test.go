package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

func (e *env) ready(session string) redisstore.ReadyState {
	e.t.Helper()
	r, err := e.store.ReadyAt(e.ctx, session)
	require.NoError(e.t, err)
	return r
}

func (e *env) requireDue(session, why string) {
	e.t.Helper()
	r := e.ready(session)
	require.True(e.t, r.Listed && r.Due, "%s: session %q should be listed due, got %+v", why, session, r)
}

func (e *env) requireHeld(session string, until time.Time, why string) {
	e.t.Helper()
	r := e.ready(session)
	require.Equal(e.t, redisstore.ReadyState{Listed: true, At: time.UnixMilli(until.UnixMilli())}, r, "%s: session %q", why, session)
}

func (e *env) requireUnlisted(session, why string) {
	e.t.Helper()
	require.Equal(e.t, redisstore.ReadyState{}, e.ready(session), "%s: session %q", why, session)
}

// The index follows a session through every transition of its work: new
// heads, claims, completions freeing a lane's next head, failures with and
// without a retry hold, dead letters, redrives, releases and snoozes,
// renewals, lapses and a clear.
func TestReadyIndexFollowsEveryTransition(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.requireUnlisted("s", "a session never written")
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		e.requireUnlisted("s", "an append with no targets gives no work")

		lane := []a2redis.Target{{Consumer: "l", Lane: "x"}}
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: lane}, {Type: "t", Targets: lane}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		e.requireDue("s", "a lane head")

		claim := func() redisstore.ClaimResult {
			t.Helper()
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			return c
		}
		c := claim()
		require.Len(t, c.Heads, 1)
		e.requireHeld("s", e.clock.Now().Add(time.Minute), "the lane head is claimed, its successor waits behind it")

		firstEnd := e.clock.Now().Add(time.Minute)
		e.clock.Advance(10 * time.Second)
		r, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w", TTL: time.Minute, Claims: []redisstore.Attempt{{Head: c.Heads[0].Ref(), Attempt: 1}}})
		require.NoError(t, err)
		require.Len(t, r.Renewed, 1)
		renewedEnd := e.clock.Now().Add(time.Minute)
		e.requireHeld("s", firstEnd, "a renewal keeps the earlier end listed (early is safe; no index update per renewal)")
		e.clock.Advance(51 * time.Second)
		e.requireDue("s", "the listed end passed")
		next, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w2", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Busy, next.Outcome, "the renewed lease still holds the head")
		e.requireHeld("s", renewedEnd, "the busy claim listed the session again from its true state")

		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, done.Outcome)
		e.requireDue("s", "a completion frees the lane's next head")

		c = claim()
		require.Len(t, c.Heads, 1)
		f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, MaxFailures: 3, RetryAfter: 30 * time.Second})
		require.NoError(t, err)
		require.Equal(t, redisstore.Failed, f.Outcome)
		e.requireHeld("s", e.clock.Now().Add(30*time.Second), "a retry hold")
		e.clock.Advance(31 * time.Second)
		e.requireDue("s", "the retry hold ended")

		c = claim()
		require.Len(t, c.Heads, 1)
		rel, err := e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(c.Heads[0])}, Delay: 5 * time.Second})
		require.NoError(t, err)
		require.Equal(t, []redisstore.ReleaseOutcome{redisstore.Released}, rel)
		e.requireHeld("s", e.clock.Now().Add(5*time.Second), "a snooze holds the head")
		e.clock.Advance(5 * time.Second)

		c = claim()
		require.Len(t, c.Heads, 1)
		require.Equal(t, int64(1), c.Heads[0].Failures, "the release counted no failure")
		rel, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(c.Heads[0])}})
		require.NoError(t, err)
		require.Equal(t, []redisstore.ReleaseOutcome{redisstore.Released}, rel)
		e.requireDue("s", "a release frees the head at once")
		rel, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(c.Heads[0])}})
		require.NoError(t, err)
		require.Equal(t, []redisstore.ReleaseOutcome{redisstore.ReleaseSuperseded}, rel, "a released attempt holds nothing")

		c = claim()
		require.Len(t, c.Heads, 1)
		f, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, MaxFailures: 2})
		require.NoError(t, err)
		require.Equal(t, redisstore.DeadLettered, f.Outcome)
		e.requireUnlisted("s", "the lane's only head is dead-lettered")

		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "l", Lane: "x", Index: c.Heads[0].Index, Action: redisstore.Retry})
		require.NoError(t, err)
		require.True(t, rd.Redriven)
		e.requireDue("s", "a redriven head")

		c = claim()
		require.Len(t, c.Heads, 1)
		e.clock.Advance(2 * time.Minute)
		e.requireDue("s", "a lapsed lease is claimable: the index listed it until the lease's end, which has passed")

		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		e.requireUnlisted("s", "a cleared session has no work")
	})
}

// Work wake-ups: a session that gets work claimable now is announced on its
// shard's work channel — an append, a completion that frees a lane's next
// head, a release and a redrive — and a session that already had work is
// not announced again.
func TestWorkWakeUps(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		notices := make(chan notify.WorkNotice, 64)
		gaps := 0
		w := notify.NewWorkWatcher(e.store, notify.SubscriberOptions{})
		go func() { _ = w.Watch(ctx, func(n notify.WorkNotice) error { notices <- n; return nil }) }()
		for gaps < e.store.ReadyShards() {
			select {
			case n := <-notices:
				require.True(t, n.Gap, "first, every shard reports its subscription: %+v", n)
				gaps++
			case <-time.After(10 * time.Second):
				t.Fatalf("only %d of %d shards subscribed", gaps, e.store.ReadyShards())
			}
		}
		expect := func(session, why string) {
			t.Helper()
			select {
			case n := <-notices:
				require.Equal(t, notify.WorkNotice{Shard: keys.ReadyShard(session, e.store.ReadyShards()), Session: session}, n, why)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no wake-up for %q", why, session)
			}
		}
		quiet := func(why string) {
			t.Helper()
			select {
			case n := <-notices:
				t.Fatalf("%s: unexpected %+v", why, n)
			case <-time.After(200 * time.Millisecond):
			}
		}
		lane := []a2redis.Target{{Consumer: "l", Lane: "x"}}
		_, err := e.store.Append(e.ctx, "a", []a2redis.Event{{Type: "t", Targets: lane}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		expect("a", "an append gives work")
		_, err = e.store.Append(e.ctx, "a", []a2redis.Event{{Type: "t", Targets: lane}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		quiet("the session already had work")
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "a", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "a", Head: c.Heads[0].Ref(), Attempt: 1})
		require.NoError(t, err)
		expect("a", "a completion frees the lane's next head")
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "a", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		_, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "a", Attempts: []redisstore.Attempt{redisstore.AttemptOf(c.Heads[0])}})
		require.NoError(t, err)
		expect("a", "a release")
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "a", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "a", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, MaxFailures: 1})
		require.NoError(t, err)
		quiet("a dead letter gives no work")
		_, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "a", Consumer: "l", Lane: "x", Index: c.Heads[0].Index, Action: redisstore.Retry})
		require.NoError(t, err)
		expect("a", "a redrive")
	})
}

// ClaimNext finds work in whichever sessions have it, and serves them in
// turn: one busy session cannot starve the others.
func TestClaimNextIsFair(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		busy := make([]a2redis.Event, 100)
		for i := range busy {
			busy[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
		}
		_, err := e.store.Append(e.ctx, "busy", busy, redisstore.AppendOptions{})
		require.NoError(t, err)
		const quiet = 10
		for i := range quiet {
			e.clock.Advance(time.Millisecond)
			_, err := e.store.Append(e.ctx, fmt.Sprintf("q%d", i), []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		e.clock.Advance(time.Millisecond)
		served := map[string]int{}
		for range quiet + 1 {
			r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Limit: 1})
			require.NoError(t, err)
			require.Equal(t, redisstore.Claimed, r.Outcome)
			require.Len(t, r.Heads, 1)
			served[r.Session]++
			e.clock.Advance(time.Millisecond)
		}
		assert.Len(t, served, quiet+1, "every session served once before any twice: %v", served)

		// The rest is the busy session's; then nothing until the leases end.
		total := 0
		for {
			r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			if r.Outcome != redisstore.Claimed {
				require.Equal(t, redisstore.Busy, r.Outcome)
				assert.True(t, r.NextAt.After(e.clock.Now()) && !r.NextAt.After(e.clock.Now().Add(time.Minute)), "NextAt is the first lease's end: %v", r.NextAt)
				break
			}
			require.Equal(t, "busy", r.Session)
			total += len(r.Heads)
		}
		assert.Equal(t, 99, total)
	})
}

// Concurrent ClaimNext callers over many sessions claim every head exactly
// once.
func TestClaimNextConcurrentCallersClaimEachHeadOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const sessions, perSession, workers = 40, 5, 6
		for i := range sessions {
			batch := make([]a2redis.Event, perSession)
			for j := range batch {
				batch[j] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "l", Lane: "x"}}}
			}
			_, err := e.store.Append(e.ctx, fmt.Sprintf("s%d", i), batch, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder := fmt.Sprintf("w%d", w)
				for {
					r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: holder, TTL: time.Minute, Limit: 3})
					if !assert.NoError(t, err) {
						return
					}
					if r.Outcome != redisstore.Claimed {
						if r.NextAt.IsZero() {
							return // nothing claimable and nothing held: all done
						}
						time.Sleep(time.Millisecond) // a lane's next head frees when its holder completes
						continue
					}
					done := make([]redisstore.Attempt, len(r.Heads))
					for i, h := range r.Heads {
						mu.Lock()
						seen[fmt.Sprintf("%s/%s/%s/%d", r.Session, h.Consumer, h.Lane, h.Index)]++
						mu.Unlock()
						done[i] = redisstore.AttemptOf(h)
					}
					res, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: r.Session, Attempts: done})
					if !assert.NoError(t, err) {
						return
					}
					for _, one := range res {
						assert.Equal(t, redisstore.Completed, one.Outcome)
					}
				}
			}()
		}
		wg.Wait()
		dup := 0
		for _, n := range seen {
			if n > 1 {
				dup++
			}
		}
		assert.Equal(t, 0, dup, "heads claimed twice")
		assert.Len(t, seen, sessions*perSession*2, "every (consumer, event) claimed")
		// The last completions' updates may still ride (they go within
		// the ride, 5 ms, on their own).
		var listed []redisstore.ReadyShardStats
		require.Eventually(t, func() bool {
			stats, err := e.store.ReadyStats(e.ctx)
			require.NoError(t, err)
			listed = listed[:0]
			for _, st := range stats {
				if st.Due+st.Held > 0 {
					listed = append(listed, st)
				}
			}
			return len(listed) == 0
		}, 30*time.Second, 5*time.Millisecond, "shards list nothing once all is done: %+v", listed)
	})
}

// A lost index update (the process died between a write and its update) is
// restored by the repair; a repair over an index that is right applies
// nothing, and a ClaimNext that finds a stale entry lists the session again
// from its true state.
func TestRepairReadyRestoresLostUpdates(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const n = 30
		for i := range n {
			_, err := e.store.Append(e.ctx, fmt.Sprintf("s%d", i), []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		// Lose every index update: drop every shard.
		for shard := range e.store.ReadyShards() {
			r := keys.ReadyFor(e.prefix, shard)
			for _, key := range []string{r.Index(), r.Versions()} {
				require.NoError(t, e.client.Do(e.ctx, e.client.B().Del().Key(key).Build()).Error())
			}
		}
		r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, redisstore.Settled, r.Outcome, "the index lost everything")

		st, err := e.store.RepairReady(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, redisstore.RepairStats{Sessions: n, Sent: n}, st)
		for i := range n {
			e.requireDue(fmt.Sprintf("s%d", i), "repaired")
		}
		st, err = e.store.RepairReady(e.ctx)
		require.NoError(t, err)
		assert.Equal(t, n, st.Sessions)

		ran, _, err := e.store.TryRepairReady(e.ctx, time.Hour)
		require.NoError(t, err)
		assert.True(t, ran)
		ran, _, err = e.store.TryRepairReady(e.ctx, time.Hour)
		require.NoError(t, err)
		assert.False(t, ran, "one repair per interval per prefix")

		// A stale entry: the index says due, the session has nothing.
		shard := keys.ReadyShard("ghost", e.store.ReadyShards())
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Zadd().Key(keys.ReadyFor(e.prefix, shard).Index()).ScoreMember().ScoreMember(1, "ghost").Build()).Error())
		claimed := 0
		for {
			r, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			if r.Outcome != redisstore.Claimed {
				break
			}
			claimed += len(r.Heads)
		}
		assert.Equal(t, n, claimed)
		e.requireUnlisted("ghost", "a stale entry is listed again from the session's true state")
	})
}

// Declared consumers: an Append that names none starts the declared typed
// log cursors, and claims, renewals, redrives and releases naming an
// undeclared consumer are refused before anything is written.
func TestDeclaredConsumers(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			declared := []a2redis.Consumer{{Name: "auditor", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"message.flagged"}}}, {Name: "indexer"}}
			e := newEnv(t, tg, func(c *redisstore.Config) { c.Consumers = declared })
			assert.Equal(t, declared, e.store.Consumers(), "the store reports its declared consumers")
			assert.Equal(t, e.clock.Now(), e.store.Now(), "and tells time by its clock")
			_, err := e.store.Append(e.ctx, "chat", []a2redis.Event{{Type: "message.sent"}, {Type: "message.flagged"}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			e.requireDue("chat", "the auditor's log cursor has a head")
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "chat", Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, c.Heads, 1)
			assert.Equal(t, "auditor", c.Heads[0].Consumer)
			assert.Equal(t, "message.flagged", c.Heads[0].Type)

			for name, call := range map[string]func() error{
				"claim": func() error {
					_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "chat", Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "moderator"}}})
					return err
				},
				"renew": func() error {
					_, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "chat", Holder: "w", TTL: time.Minute, Claims: []redisstore.Attempt{{Head: a2redis.HeadRef{Consumer: "moderator", Index: 1}, Attempt: 1}}})
					return err
				},
				"redrive": func() error {
					_, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "chat", Consumer: "moderator", Index: 1, Action: redisstore.Retry})
					return err
				},
				"release": func() error {
					_, err := e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "chat", Attempts: []redisstore.Attempt{{Head: a2redis.HeadRef{Consumer: "moderator", Index: 1}, Attempt: 1}}})
					return err
				},
			} {
				err := call()
				assert.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%s naming an undeclared consumer: %v", name, err)
			}
		})
	}
}

// Every store on a prefix uses one shard count, and the layout of the seed
// (tagged-1) is refused with a reason.
func TestReadyShardsAndLayoutAreChecked(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tg)
			_, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, ReadyShards: 3})
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "set up with 8 shards")

			old := e.prefix + "-old"
			require.NoError(t, e.client.Do(e.ctx, e.client.B().Set().Key(keys.Schema(old)).Value(keys.SeedLayout).Build()).Error())
			_, err = redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: old})
			require.ErrorIs(t, err, a2redis.ErrLayoutMismatch)
			assert.Contains(t, err.Error(), "TypeScript")
		})
	}
}

// CompleteAndClaim completes a lane head and claims its next head in one
// script call: an ordered lane costs one script call per event.
func TestCompleteAndClaimRunsALaneInOneCallPerEvent(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const n = 6
		batch := make([]a2redis.Event, n)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i+1)), Targets: []a2redis.Target{{Consumer: "l", Lane: "x"}}}
		}
		_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		head := c.Heads[0]
		var order []int64
		for {
			order = append(order, head.Index)
			require.Equal(t, fmt.Sprintf(`{"n":%d}`, head.Index), string(head.Payload), "the claimed next head carries its event")
			r, err := e.store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{redisstore.AttemptOf(head)}},
				redisstore.NextClaim{Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, []redisstore.CompleteResult{{Outcome: redisstore.Completed, Events: []a2redis.StoredEvent{}}}, r.Results)
			if r.Next.Outcome != redisstore.Claimed {
				require.Equal(t, redisstore.Settled, r.Next.Outcome)
				break
			}
			require.Len(t, r.Next.Heads, 1)
			head = r.Next.Heads[0]
			require.Equal(t, int64(1), head.Attempts)
			require.Equal(t, "w", head.Holder)
			e.requireHeld("s", e.clock.Now().Add(time.Minute), "the next head is held by the completer")
		}
		assert.Equal(t, []int64{1, 2, 3, 4, 5, 6}, order)
		e.requireUnlisted("s", "the lane is done")

		// A stale attempt claims nothing; a fenced next head is completed
		// by its new holder only.
		_, err = e.store.Append(e.ctx, "s", batch[:2], redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		r, err := e.store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{{Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts + 1}}},
			redisstore.NextClaim{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, redisstore.CompleteSuperseded, r.Results[0].Outcome)
		assert.Equal(t, redisstore.Settled, r.Next.Outcome, "nothing completed, nothing claimed")
	})
}

// A work watch survives a killed connection: every shard reports a gap
// again once resubscribed (so the worker reads the index: a wake-up lost in
// the gap costs a read, never work), and announcements flow again.
func TestWorkWatchSurvivesKilledConnections(t *testing.T) {
	c := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: redistest.Prefix(t)})
	require.NoError(t, err)
	notices := make(chan notify.WorkNotice, 64)
	w := notify.NewWorkWatcher(s, notify.SubscriberOptions{})
	go func() { _ = w.Watch(ctx, func(n notify.WorkNotice) error { notices <- n; return nil }) }()
	gaps := func(why string) {
		t.Helper()
		seen := map[int]bool{}
		for len(seen) < s.ReadyShards() {
			select {
			case n := <-notices:
				require.True(t, n.Gap, "%s: %+v", why, n)
				seen[n.Shard] = true
			case <-ctx.Done():
				t.Fatalf("%s: only %d of %d shards reported a gap", why, len(seen), s.ReadyShards())
			}
		}
	}
	gaps("subscribed")
	killed, err := c.Do(ctx, c.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(s.ReadyShards()), killed, "one subscription connection per shard")
	gaps("resubscribed after the kill")
	_, err = s.Append(ctx, "after", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	select {
	case n := <-notices:
		require.Equal(t, notify.WorkNotice{Shard: keys.ReadyShard("after", s.ReadyShards()), Session: "after"}, n)
	case <-ctx.Done():
		t.Fatal("no wake-up after the reconnect")
	}
}

// A claim serving one consumer finds its head behind thousands of other
// consumers' heads, each script call scanning a bounded page.
func TestClaimServingOneConsumerBehindManyOthers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		others := make([]a2redis.Event, 3000)
		for i := range others {
			others[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "other"}}}
		}
		for part := range slices.Chunk(others, redisstore.DefaultMaxBatch) {
			_, err := e.store.Append(e.ctx, "s", part, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "mine"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "mine"}}})
		require.NoError(t, err)
		require.Equal(t, redisstore.Claimed, c.Outcome)
		require.Len(t, c.Heads, 1)
		assert.Equal(t, int64(3001), c.Heads[0].Index)
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "mine"}}})
		require.NoError(t, err)
		assert.Equal(t, redisstore.Busy, c.Outcome, "its one head is held")
	})
}

// A store's ready-index updates to one shard go together while a call to
// it is under way: 20 appends to sessions of one shard, their updates held
// behind a call the test keeps under way, then one ready_index call for
// all 20 (counted exactly: 20 append scripts and 1 more), every session
// listed. Each append returned only once its own update was applied.
func TestReadyUpdatesShareCallsPerShard(t *testing.T) {
	t.Parallel()
	client := privateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), ReadyShards: 1})
	require.NoError(t, err)
	one := []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}
	_, err = s.Append(ctx, "warm", one, redisstore.AppendOptions{}) // scripts loaded
	require.NoError(t, err)
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())

	release := redisstore.HoldReadyLine(s, 0)
	const n = 20
	var wg sync.WaitGroup
	var returned atomic.Int64
	for i := range n {
		wg.Go(func() {
			_, err := s.Append(ctx, fmt.Sprint("s", i), one, redisstore.AppendOptions{})
			assert.NoError(t, err)
			returned.Add(1)
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for redisstore.ReadyLineWaiting(s, 0) < n {
		require.True(t, time.Now().Before(deadline), "the updates never queued (%d)", redisstore.ReadyLineWaiting(s, 0))
		time.Sleep(time.Millisecond)
	}
	require.Zero(t, returned.Load(), "an append returned before its ready-index update was applied")
	release()
	wg.Wait()
	calls, err := redistest.CommandCalls(ctx, client)
	require.NoError(t, err)
	assert.Equal(t, int64(n+1), calls["evalsha"], "20 appends and one ready_index call: %v", calls)
	stats, err := s.ReadyStats(ctx)
	require.NoError(t, err)
	listed := 0
	for _, st := range stats {
		listed += int(st.Due + st.Held)
	}
	assert.Equal(t, n+1, listed, "every session listed (and warm)")
}

// A session retired from the ready index while it gets new work: its
// completion (which leaves it settled) commits first, and its ready-index
// update is held back (behind a call of the store's line kept under way)
// until another process's append gave the session a new event and listed
// it; the late settle update is then refused by its older version. The
// session stays listed and its new head is claimed: nothing lost. Every
// target.
func TestRetireRacingAnAppendLosesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		one := []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}
		const session = "retiring"
		_, err := e.store.Append(e.ctx, session, one, redisstore.AppendOptions{})
		require.NoError(t, err)
		cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Hour})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 1)

		shard := keys.ReadyShard(session, e.store.ReadyShards())
		release := redisstore.HoldReadyLine(e.store, shard)
		completed := make(chan error, 1)
		go func() {
			_, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: []redisstore.Attempt{redisstore.AttemptOf(cl.Heads[0])}})
			completed <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for redisstore.ReadyLineWaiting(e.store, shard) < 1 {
			require.True(t, time.Now().Before(deadline), "the completion's update never queued")
			time.Sleep(time.Millisecond)
		}
		// The completion committed (settled) and its update waits: another
		// process appends and lists the session.
		other, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, Clock: e.clock.Now})
		require.NoError(t, err)
		res, err := other.Append(e.ctx, session, one, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.True(t, e.ready(session).Due, "listed by the append")
		release()
		require.NoError(t, <-completed)
		require.True(t, e.ready(session).Due, "still listed after the late settle update")

		next, err := e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Hour, AllShards: true})
		require.NoError(t, err)
		require.Equal(t, session, next.Session)
		require.Len(t, next.Heads, 1)
		require.Equal(t, res.Events[0].Index, next.Heads[0].Index, "the new event's head claimed")
	})
}
