package redisstore_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// cursorKey names a cursor and what a listing shows of it.
func cursorKey(c a2redis.Cursor) string {
	return fmt.Sprintf("%s|%s|%s|p%d|h%d|d%d", c.Consumer, c.Kind, c.Lane, c.Position, c.Head, c.Attempts)
}

func deadKey(h a2redis.HeadEvent) string {
	return fmt.Sprintf("%s|%s|%s|%d", h.Consumer, h.Kind, h.Lane, h.Index)
}

// listingSession builds a session of a few thousand heads in every state:
// each of `events` events targets five event consumers and a lane of its
// own; a log consumer reads everything. One claim takes the lowest 1000
// heads (one expiry: they share one held score); a third of them are
// completed, a third dead-lettered (the consumers dead at one index share
// a score), the rest stay claimed. It returns what Cursors and DeadLetters
// must list, as cursorKey and deadKey name them.
func listingSession(t *testing.T, e *env, events int) (cursors, dead map[string]bool) {
	t.Helper()
	audit := a2redis.Consumer{Name: "audit", Log: &a2redis.LogSpec{Lane: "all"}}
	batch := make([]a2redis.Event, events)
	for i := range batch {
		batch[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{
			{Consumer: "e0"}, {Consumer: "e1"}, {Consumer: "e2"}, {Consumer: "e3"}, {Consumer: "e4"},
			{Consumer: "lc", Lane: fmt.Sprintf("l%04d", i+1)},
		}}
	}
	// Six targets an event: batches within MaxBatchTargets.
	for part := range slices.Chunk(batch, a2redis.MaxBatchTargets/6) {
		_, err := e.store.Append(e.ctx, "s", part, redisstore.AppendOptions{Consumers: []a2redis.Consumer{audit, {Name: "lc"}}})
		require.NoError(t, err)
	}
	// The lowest 1000 heads, MaxBatch to a claim.
	var c redisstore.ClaimResult
	for len(c.Heads) < 1000 {
		more := claim(t, e, redisstore.ClaimRequest{Limit: min(redisstore.DefaultMaxBatch, 1000-len(c.Heads))})
		require.NotEmpty(t, more.Heads)
		c.Heads = append(c.Heads, more.Heads...)
	}

	// Every cursor as appended (by consumer, kind, lane and, for an event
	// cursor, head), then as claimed, completed or dead-lettered.
	want := map[a2redis.HeadRef]a2redis.Cursor{}
	ref := func(consumer string, kind a2redis.CursorKind, lane string, idx int64) a2redis.HeadRef {
		if kind != a2redis.EventCursor {
			idx = 0
		}
		return a2redis.HeadRef{Consumer: consumer + "|" + string(kind), Lane: lane, Index: idx}
	}
	put := func(c a2redis.Cursor) { want[ref(c.Consumer, c.Kind, c.Lane, c.Head)] = c }
	for i := int64(1); i <= int64(events); i++ {
		for k := range 5 {
			put(a2redis.Cursor{Consumer: fmt.Sprintf("e%d", k), Kind: a2redis.EventCursor, Position: i - 1, Head: i})
		}
		put(a2redis.Cursor{Consumer: "lc", Kind: a2redis.LaneCursor, Lane: fmt.Sprintf("l%04d", i), Head: i})
	}
	put(a2redis.Cursor{Consumer: "audit", Kind: a2redis.LogCursor, Lane: "all", Head: 1})
	dead = map[string]bool{}
	var done []a2redis.HeadEvent
	for n, h := range c.Heads {
		at := ref(h.Consumer, h.Kind, h.Lane, h.Index)
		cur := want[at]
		cur.Attempts = 1
		switch n % 3 {
		case 0:
			done = append(done, h)
			cur.Position, cur.Head, cur.Attempts = h.Index, 0, 0
			switch h.Kind {
			case a2redis.EventCursor:
				delete(want, at)
				continue
			case a2redis.LogCursor:
				cur.Head = h.Index + 1
			}
		case 1:
			f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "no", MaxFailures: 1})
			require.NoError(t, err)
			require.Equal(t, redisstore.DeadLettered, f.Outcome)
			dead[deadKey(h)] = true
		}
		want[at] = cur
	}
	completeAll(t, e, "s", done)
	require.Greater(t, len(want), 5*events, "thousands of cursors")
	cursors = map[string]bool{}
	for _, c := range want {
		cursors[cursorKey(c)] = true
	}
	return cursors, dead
}

// Paged listings list every cursor and every dead letter exactly once, a
// page at most Limit long, whatever the page size — through ties of
// thousands of held heads at one score and across the step from the lane
// records to the runnable set.
func TestListingPages(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const events = 400
		wantCursors, wantDead := listingSession(t, e, events)
		require.Greater(t, len(wantDead), 300)

		all, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		got := map[string]bool{}
		for _, c := range all {
			got[cursorKey(c)] = true
		}
		assert.Len(t, all, len(wantCursors))
		assert.Equal(t, wantCursors, got)

		for _, limit := range []int{1, 7, redisstore.MaxPageLimit} {
			seen := map[string]int{}
			pages := 0
			req := redisstore.PageRequest{Limit: limit}
			for {
				page, err := e.store.CursorsPage(e.ctx, "s", req)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page.Cursors), limit)
				for _, c := range page.Cursors {
					seen[cursorKey(c)]++
				}
				pages++
				if page.Next == "" {
					break
				}
				req.After = page.Next
			}
			for key, n := range seen {
				require.Equal(t, 1, n, "limit %d: %s listed %d times", limit, key, n)
			}
			require.Len(t, seen, len(wantCursors), "limit %d", limit)
			if limit < redisstore.MaxPageLimit {
				assert.GreaterOrEqual(t, pages, len(wantCursors)/limit, "limit %d", limit)
			}
		}

		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		gotDead := map[string]bool{}
		for _, h := range dead {
			gotDead[deadKey(h)] = true
			require.Equal(t, "no", h.LastError)
		}
		assert.Equal(t, wantDead, gotDead)
		for _, limit := range []int{1, 4} {
			var listed []a2redis.HeadEvent
			req := redisstore.PageRequest{Limit: limit}
			for {
				page, err := e.store.DeadLettersPage(e.ctx, "s", req)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page.DeadLetters), limit)
				listed = append(listed, page.DeadLetters...)
				if page.Next == "" {
					break
				}
				req.After = page.Next
			}
			require.Len(t, listed, len(wantDead), "limit %d", limit)
			seen := map[string]bool{}
			for i, h := range listed {
				require.False(t, seen[deadKey(h)], "limit %d: %s listed twice", limit, deadKey(h))
				seen[deadKey(h)] = true
				if i > 0 {
					require.LessOrEqual(t, listed[i-1].Index, h.Index, "pages follow each other in index order")
				}
			}
		}
	})
}

// Heads that leave the runnable set between two pages — the one a page
// ended on included — make no later page skip or repeat the others.
func TestListingPagesWhileHeadsComplete(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		targets := []a2redis.Target{{Consumer: "a"}, {Consumer: "b"}, {Consumer: "c"}, {Consumer: "d"}, {Consumer: "e"}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: targets}, {Type: "t", Targets: targets}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		// Ten heads: five share score 1, five score 2; claim the lower five
		// (they then share one held score).
		c := claim(t, e, redisstore.ClaimRequest{Limit: 5})
		require.Len(t, c.Heads, 5)
		listed := map[string]bool{}
		req := redisstore.PageRequest{Limit: 2}
		for round := 0; ; round++ {
			page, err := e.store.CursorsPage(e.ctx, "s", req)
			require.NoError(t, err)
			for _, cur := range page.Cursors {
				require.False(t, listed[cursorKey(cur)], "%s listed twice", cursorKey(cur))
				listed[cursorKey(cur)] = true
				// Complete what was listed, the page's last head included.
				if cur.Holder != "" {
					_, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{
						{Head: a2redis.HeadRef{Consumer: cur.Consumer, Index: cur.Head}, Attempt: cur.Attempts}}})
					require.NoError(t, err)
				}
			}
			if page.Next == "" {
				break
			}
			req.After = page.Next
			require.Less(t, round, 20)
		}
		assert.Len(t, listed, 10)
	})
}

// Bad page requests are refused before anything is read.
func TestListingRejectsBadPages(t *testing.T) {
	e := newEnv(t, redistest.Targets[0])
	for _, req := range []redisstore.PageRequest{{Limit: -1}, {Limit: redisstore.MaxPageLimit + 1}, {After: "x"}, {After: "h1"}, {After: "e:"}, {After: "ex:y"}, {After: "d1:x"}} {
		_, err := e.store.CursorsPage(e.ctx, "s", req)
		assert.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", req)
	}
	for _, req := range []redisstore.PageRequest{{Limit: -1}, {After: "e1:x"}, {After: "d:x"}, {After: "d1:"}} {
		_, err := e.store.DeadLettersPage(e.ctx, "s", req)
		assert.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", req)
	}
	_, err := e.store.CursorsPage(e.ctx, "", redisstore.PageRequest{})
	assert.ErrorIs(t, err, a2redis.ErrInvalidArgument)
}

// A presence of more fields than one HSCAN step or one prune call holds is
// read whole, and pruned whole once it expires.
func TestPresenceReadsInSteps(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const n = 1200
		values := make(map[string]json.RawMessage, n)
		for i := range n {
			values[fmt.Sprintf("f%04d", i)] = json.RawMessage(`1`)
		}
		// Several participants: one write holds at most MaxBatch fields.
		parts := make([]map[string]json.RawMessage, (n+redisstore.DefaultMaxBatch-1)/redisstore.DefaultMaxBatch)
		for i := range n {
			f := fmt.Sprintf("f%04d", i)
			k := i * len(parts) / n
			if parts[k] == nil {
				parts[k] = map[string]json.RawMessage{}
			}
			parts[k][f] = values[f]
		}
		for k, half := range parts {
			_, err := e.store.PresenceSet(e.ctx, "s", redisstore.PresenceWrite{Participant: fmt.Sprintf("p%d", k), Values: half, At: e.clock.Now(), TTL: time.Minute})
			require.NoError(t, err)
		}
		got, err := e.store.PresenceRead(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, got, n)
		assert.Equal(t, "f0000", got[0].Field)
		assert.Equal(t, "f1199", got[n-1].Field)

		e.clock.Advance(2 * time.Minute)
		got, err = e.store.PresenceRead(e.ctx, "s")
		require.NoError(t, err)
		assert.Empty(t, got)
		left, err := e.client.Do(e.ctx, e.client.B().Hlen().Key(keysFor(e, "s").Presence()).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(0), left, "every expired field pruned")
	})
}
