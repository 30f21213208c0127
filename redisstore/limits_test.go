package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// The limits: every count up to Config.MaxBatch and the claim limit works
// on every target, however the heads fall into chunks. A heads chunk holds
// 1000 indexes; with ten consumers per event, MaxBatch/10 events put
// MaxBatch heads in one chunk, so one script builds many field names for
// one hash, each column of a row being a field (Redis' Lua unpacks at most
// ~8000 values, gopher-lua ~5100: every variadic call is sliced).

const (
	limitConsumers = 10
	limitEvents    = redisstore.DefaultMaxBatch / limitConsumers // one chunk
)

// completions names every head for CompleteAttempts.
func completions(heads []a2redis.HeadEvent) []redisstore.Attempt {
	out := make([]redisstore.Attempt, len(heads))
	for i, h := range heads {
		out[i] = redisstore.AttemptOf(h)
	}
	return out
}

func completeAll(t *testing.T, e *env, session string, heads []a2redis.HeadEvent) {
	t.Helper()
	results, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: completions(heads)})
	require.NoError(t, err)
	require.Len(t, results, len(heads))
	for i, r := range results {
		require.Equal(t, redisstore.Completed, r.Outcome, "Attempts[%d]", i)
		require.False(t, r.Replayed, "Attempts[%d]", i)
	}
}

// Event heads: MaxBatch of them in one chunk, claimed in one call (the
// general claim, after a release), half completed in one call (the fast
// completion), the rest lapsed: taken over one at a time, each takeover
// releasing up to scripts.TakeoverRelease of the others, then claimed in
// one call (the general claim) and completed in one call (the general
// completion). The default limit takes exactly DefaultClaimLimit heads.
func TestLimitsEventHeadsInOneChunk(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		targets := make([]a2redis.Target, limitConsumers)
		for c := range targets {
			targets[c] = a2redis.Target{Consumer: fmt.Sprintf("c%d", c)}
		}
		events := make([]a2redis.Event, limitEvents)
		for i := range events {
			events[i] = a2redis.Event{Type: "t", Targets: targets}
		}
		_, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)

		first := claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, first.Heads, redisstore.DefaultClaimLimit, "the default limit")
		_, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: completions(first.Heads)})
		require.NoError(t, err)

		all := claim(t, e, redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch})
		require.Len(t, all.Heads, redisstore.DefaultMaxBatch)
		renewed, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: claimsOf(all.Heads)})
		require.NoError(t, err)
		require.Len(t, renewed.Renewed, redisstore.DefaultMaxBatch)

		// Every other head: half of them completed in one call.
		var done, lapsed []a2redis.HeadEvent
		for i, h := range all.Heads {
			if i%2 == 0 {
				done = append(done, h)
			} else {
				lapsed = append(lapsed, h)
			}
		}
		completeAll(t, e, "s", done)
		e.clock.Advance(2 * time.Minute)
		again, rest := takeOverPile(t, e, len(lapsed))
		for _, h := range append(again, rest...) {
			require.Equal(t, int64(0), h.Failures, "lost together: no lapse counted")
			require.GreaterOrEqual(t, h.Attempts, int64(2), "a new attempt")
		}
		completeAll(t, e, "s", again)
		completeAll(t, e, "s", rest)

		settled := claim(t, e, redisstore.ClaimRequest{})
		assert.Equal(t, redisstore.Settled, settled.Outcome)
		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		assert.Empty(t, cursors)
	})
}

// takeOverPile claims, for w2, a pile of `lapsed` claims one holder lost
// together: each takeover takes one head alone and releases up to
// scripts.TakeoverRelease of the others, and the claim after the last one
// takes every released head. It returns the heads taken over and the rest.
func takeOverPile(t *testing.T, e *env, lapsed int) (again, rest []a2redis.HeadEvent) {
	t.Helper()
	for {
		r := claim(t, e, redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch, Holder: "w2"})
		require.NotEmpty(t, r.Heads)
		if len(r.Heads) > 1 {
			rest = r.Heads
			break
		}
		require.Contains(t, r.Heads[0].LastError, "lease expired: held by", "a takeover runs alone")
		again = append(again, r.Heads[0])
		require.Less(t, len(again), lapsed)
	}
	// Each takeover but the last releases TakeoverRelease heads and leaves
	// at least two lapsed; the last releases the rest.
	want := 1
	for left := lapsed - 1; left > scripts.TakeoverRelease; want++ {
		left -= min(scripts.TakeoverRelease, left-2) + 1
	}
	require.Len(t, again, want, "takeovers of a pile of %d", lapsed)
	require.Len(t, rest, lapsed-len(again))
	return again, rest
}

func claimsOf(heads []a2redis.HeadEvent) []redisstore.Attempt {
	out := make([]redisstore.Attempt, len(heads))
	for i, h := range heads {
		out[i] = redisstore.AttemptOf(h)
	}
	return out
}

// Lane heads: MaxBatch lanes, each with two events queued, the first
// heads in one chunk and the next ones in the next chunk. Claimed and
// completed in one call each (the fast paths: every lane moves to its next
// head), then the next heads lapse: one is taken over alone and the others
// released by takeovers (the general claim reads MaxBatch lane records),
// claimed in the next call, and completed (the general completion).
func TestLimitsLaneHeadsInOneChunk(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		events := make([]a2redis.Event, 2*limitEvents)
		for i := range events {
			targets := make([]a2redis.Target, limitConsumers)
			for c := range targets {
				targets[c] = a2redis.Target{Consumer: "c", Lane: fmt.Sprintf("l%d-%d", i%limitEvents, c)}
			}
			events[i] = a2redis.Event{Type: "t", Targets: targets}
		}
		// Two batches of MaxBatch targets each.
		for _, batch := range [][]a2redis.Event{events[:limitEvents], events[limitEvents:]} {
			_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
			require.NoError(t, err)
		}

		first := claim(t, e, redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch})
		require.Len(t, first.Heads, redisstore.DefaultMaxBatch)
		assert.Equal(t, int64(limitEvents), first.Heads[len(first.Heads)-1].Index)
		completeAll(t, e, "s", first.Heads)

		second := claim(t, e, redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch})
		require.Len(t, second.Heads, redisstore.DefaultMaxBatch)
		assert.Equal(t, int64(limitEvents+1), second.Heads[0].Index)
		e.clock.Advance(2 * time.Minute)
		again, rest := takeOverPile(t, e, redisstore.DefaultMaxBatch)
		assert.Equal(t, int64(2), again[0].Attempts)
		assert.Equal(t, int64(2), rest[0].Attempts)
		completeAll(t, e, "s", again)
		completeAll(t, e, "s", rest)

		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, cursors, redisstore.DefaultMaxBatch)
		for _, c := range cursors {
			require.Equal(t, int64(0), c.Head, "every lane is caught up: %+v", c)
			require.Greater(t, c.Position, int64(limitEvents))
		}
	})
}

// A batch of exactly MaxBatch events goes in, plain or with lane targets
// (the general append), and as the events a completion returns; one more
// is refused before anything is written.
func TestLimitsMaxBatch(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		batch := func(lane string) []a2redis.Event {
			events := make([]a2redis.Event, redisstore.DefaultMaxBatch)
			for i := range events {
				events[i] = a2redis.Event{Type: "t"}
				if lane != "" {
					events[i].Targets = []a2redis.Target{{Consumer: "c", Lane: lane}}
				}
			}
			return events
		}
		res, err := e.store.Append(e.ctx, "plain", batch(""), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, redisstore.DefaultMaxBatch)
		res, err = e.store.Append(e.ctx, "lane", batch("l"), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, redisstore.DefaultMaxBatch)

		c := claim(t, e, redisstore.ClaimRequest{Session: "lane"})
		require.Len(t, c.Heads, 1)
		returned := batch("m")
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "lane", Head: c.Heads[0].Ref(), Attempt: 1, Events: returned})
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, done.Outcome)
		require.Len(t, done.Events, redisstore.DefaultMaxBatch)
		b, err := e.store.Bounds(e.ctx, "lane")
		require.NoError(t, err)
		assert.Equal(t, int64(2*redisstore.DefaultMaxBatch), b.Head)

		_, err = e.store.Append(e.ctx, "plain", append(batch(""), a2redis.Event{Type: "t"}), redisstore.AppendOptions{})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		b, err = e.store.Bounds(e.ctx, "plain")
		require.NoError(t, err)
		assert.Equal(t, int64(redisstore.DefaultMaxBatch), b.Head)
	})
}

// Names up to 64 KiB — consumers and lanes, with the separators cursor ids
// use — work through append, claim, complete, fail, dead letters, redrive
// and the listings (gopher-lua's string.byte(s) returns every byte of s).
func TestLongNames(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		long := func(seed string) string {
			s := strings.Repeat(seed, 64<<10/len(seed)+1)[:64<<10]
			for !utf8.ValidString(s) {
				s = s[:len(s)-1]
			}
			return s + strings.Repeat("x", 64<<10-len(s))
		}
		consumer, lane, log := long("c:#L1"), long("l:G#é"), long("g:L")
		require.Len(t, consumer, 64<<10)
		logger := a2redis.Consumer{Name: consumer, Log: &a2redis.LogSpec{Lane: log}}
		served := []a2redis.Consumer{logger}
		targets := []a2redis.Target{{Consumer: consumer}, {Consumer: consumer, Lane: lane}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "a", Targets: targets}, {Type: "b", Targets: targets}},
			redisstore.AppendOptions{Consumers: served})
		require.NoError(t, err)

		// The event heads at 1 and 2, the lane and log heads at 1: those at
		// 1 completed one by one, the rest dead-lettered.
		fail := func(h a2redis.HeadEvent) {
			f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "no", MaxFailures: 1})
			require.NoError(t, err)
			require.Equal(t, redisstore.DeadLettered, f.Outcome, "%s", h.Kind)
		}
		c := claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, c.Heads, 4)
		for _, h := range c.Heads {
			require.Equal(t, consumer, h.Consumer)
			require.Contains(t, []string{"", lane, log}, h.Lane)
			if h.Index == 2 {
				fail(h)
				continue
			}
			r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Consumers: served})
			require.NoError(t, err)
			require.Equal(t, redisstore.Completed, r.Outcome, "%s", h.Kind)
		}
		c = claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, c.Heads, 2)
		for _, h := range c.Heads {
			fail(h)
		}

		// Listed, redriven, claimed and completed together.
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dead, 3)
		for _, d := range dead {
			require.Equal(t, consumer, d.Consumer)
			r, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: d.Consumer, Lane: d.Lane, Index: d.Index, Action: redisstore.Retry})
			require.NoError(t, err)
			require.True(t, r.Redriven, "%s", d.Kind)
		}
		c = claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, c.Heads, 3)
		completeAll(t, e, "s", c.Heads)

		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, cursors, 2, "the lane and the log cursor")
		for _, cur := range cursors {
			assert.Equal(t, consumer, cur.Consumer)
			assert.Equal(t, int64(2), cur.Position)
			assert.Equal(t, int64(0), cur.Head)
		}
	})
}

// eachAtLimits is each, but under the race detector it leaves out
// miniredis: the detector slows its Lua interpreter about tenfold, and a
// script over MaxBatch heads then outlasts the client's I/O timeout. The
// same counts run on miniredis in the plain run (make test) and on the
// real servers in both.
func eachAtLimits(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			if raceEnabled && tg.Name == "miniredis" {
				t.Skip("-race: miniredis's Lua is too slow for MaxBatch heads in one call (the plain run covers it)")
			}
			t.Parallel()
			fn(t, newEnv(t, tg))
		})
	}
}
