package redisstore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// sessionKeys counts the keys of a session (SCAN over every node).
func (e *env) sessionKeyCount(session string) int {
	e.t.Helper()
	pattern := keys.EscapeGlob(keys.For(e.prefix, session).Base()) + "*"
	n := 0
	for _, node := range e.client.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(e.ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			require.NoError(e.t, err)
			n += len(entry.Elements)
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	return n
}

// A retention pass ends the sessions idle for its IdleFor (handled, no
// append since) and leaves the rest: a recent one, one with a head still to
// run, one with a dead letter, and one already ended; a dry run names the
// same sessions and writes nothing; with Drop the ended ones go too, to no
// key at all; passes in small steps resume from their cursor and reach
// every session.
func TestRetention(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		to := []a2redis.Target{{Consumer: "c"}}
		appendTo := func(session string, events ...a2redis.Event) {
			t.Helper()
			_, err := e.store.Append(e.ctx, session, events, redisstore.AppendOptions{})
			require.NoError(t, err)
		}
		handle := func(session string, fail bool) {
			t.Helper()
			r, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
			require.NoError(t, err)
			for _, h := range r.Heads {
				if fail {
					_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "x", Permanent: true})
				} else {
					_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts})
				}
				require.NoError(t, err)
			}
		}
		var idle []string
		for i := range 6 {
			s := "old-" + string(rune('a'+i))
			appendTo(s, a2redis.Event{Type: "t", Targets: to}, a2redis.Event{Type: "u"})
			handle(s, false)
			idle = append(idle, s)
		}
		appendTo("waiting", a2redis.Event{Type: "t", Targets: to})
		appendTo("dead", a2redis.Event{Type: "t", Targets: to})
		handle("dead", true)
		appendTo("ended", a2redis.Event{Type: "t"})
		_, err := e.store.Clear(e.ctx, "ended", redisstore.ClearOptions{})
		require.NoError(t, err)
		_, err = e.store.Reclaim(e.ctx, "ended")
		require.NoError(t, err)
		e.clock.Advance(2 * time.Hour)
		appendTo("recent", a2redis.Event{Type: "t"})

		// The target's keyspace is shared with other tests: one pass reads
		// it all (MaxScan), unless a test sets the steps small on purpose.
		const all = 1 << 30
		policy := redisstore.RetentionPolicy{IdleFor: time.Hour, DryRun: true, MaxScan: all}
		dry, err := e.store.Retention(e.ctx, policy, "")
		require.NoError(t, err)
		slices.Sort(dry.Idle)
		require.Equal(t, idle, dry.Idle, "the handled sessions idle for an hour")
		require.Zero(t, dry.Ended)
		b, err := e.store.Bounds(e.ctx, "old-a")
		require.NoError(t, err)
		require.Equal(t, redisstore.Bounds{Head: 2}, b, "a dry run writes nothing")

		// In small steps: at most 2 sessions a pass, resuming.
		policy = redisstore.RetentionPolicy{IdleFor: time.Hour, MaxSessions: 2, ScanPage: 200, MaxScan: 2000}
		var ended []string
		cursor := ""
		for pass := 0; pass < 100_000; pass++ {
			r, err := e.store.Retention(e.ctx, policy, cursor)
			require.NoError(t, err)
			require.LessOrEqual(t, len(r.Idle), 2)
			ended = append(ended, r.Idle...)
			require.Equal(t, len(r.Idle), r.Ended)
			if cursor = r.Cursor; cursor == "" && len(r.Idle) == 0 {
				break
			}
		}
		slices.Sort(ended)
		require.Equal(t, idle, slices.Compact(ended))
		b, err = e.store.Bounds(e.ctx, "old-a")
		require.NoError(t, err)
		require.Equal(t, redisstore.Bounds{Head: 3, ClearIndex: 3}, b, "ended: its clear marker")
		for _, kept := range []string{"waiting", "dead", "recent"} {
			b, err := e.store.Bounds(e.ctx, kept)
			require.NoError(t, err)
			require.Zero(t, b.ClearIndex, "%s is kept", kept)
		}

		// Drop: the ended sessions (theirs markers idle too) go whole.
		e.clock.Advance(2 * time.Hour)
		r, err := e.store.Retention(e.ctx, redisstore.RetentionPolicy{IdleFor: time.Hour, Drop: true, MaxScan: all}, "")
		require.NoError(t, err)
		slices.Sort(r.Idle)
		require.Equal(t, append(append([]string{"ended"}, idle...), "recent"), r.Idle, "the ended sessions, and the recent one, idle too by now")
		require.Equal(t, len(r.Idle), r.Dropped)
		for _, s := range r.Idle {
			require.Zero(t, e.sessionKeyCount(s), "%s dropped: no key", s)
		}
		require.NotZero(t, e.sessionKeyCount("waiting"))
		require.NotZero(t, e.sessionKeyCount("dead"))

		_, err = e.store.Retention(e.ctx, redisstore.RetentionPolicy{}, "")
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		_, err = e.store.Retention(e.ctx, redisstore.RetentionPolicy{IdleFor: time.Hour}, "nonsense")
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	})
}
