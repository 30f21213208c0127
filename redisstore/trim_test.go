package redisstore_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

// appendEvents appends n events of type t for targets (none: untargeted), with
// the ids id(i) (nil: generated), in batches of MaxBatch.
func appendEvents(t *testing.T, e *env, session string, n int, id func(int) string, targets ...a2redis.Target) {
	t.Helper()
	events := make([]a2redis.Event, n)
	for i := range events {
		events[i] = a2redis.Event{Type: "t", Targets: targets}
		if id != nil {
			events[i].ID = id(i)
		}
	}
	for part := range slices.Chunk(events, redisstore.DefaultMaxBatch) {
		_, err := e.store.Append(e.ctx, session, part, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
}

// handleHeads claims and completes up to n heads of the session.
func handleHeads(t *testing.T, e *env, session string, n int) []a2redis.HeadEvent {
	t.Helper()
	c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: n})
	require.NoError(t, err)
	done := make([]redisstore.Attempt, len(c.Heads))
	for i, h := range c.Heads {
		done[i] = redisstore.AttemptOf(h)
	}
	if len(done) > 0 {
		_, err = e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done})
		require.NoError(t, err)
	}
	return c.Heads
}

func readIndexes(t *testing.T, e *env, session string, after int64) []int64 {
	t.Helper()
	events, err := e.store.Read(e.ctx, session, after, 0)
	require.NoError(t, err)
	return indexesOf(events)
}

func span(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestTrimHandledPast: a trim removes the events every consumer is done
// with and nothing else; reads start at the retained log (one from inside
// the trimmed past fails with ErrTrimmed); indexes go on; a trimmed id is
// free again while a retained one still deduplicates; the heads left are
// claimed and a stale attempt of a trimmed head is refused. Every target.
func TestTrimHandledPast(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const s = "long"
		c := a2redis.Target{Consumer: "c"}
		appendEvents(t, e, s, 30, func(i int) string { return fmt.Sprintf("ev-%02d", i+1) }, c)
		first := handleHeads(t, e, s, 20)
		require.Len(t, first, 20)

		res, err := e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{Floor: 20, Removed: 20, Bound: 20}, res, "up to the lowest head (21)")
		b, err := e.store.Bounds(e.ctx, s)
		require.NoError(t, err)
		assert.Equal(t, redisstore.Bounds{Head: 30, Floor: 20}, b)

		assert.Equal(t, span(21, 30), readIndexes(t, e, s, 0), "from the start: the retained log")
		assert.Equal(t, span(26, 30), readIndexes(t, e, s, 25))
		assert.Equal(t, span(21, 30), readIndexes(t, e, s, 20))
		_, err = e.store.Read(e.ctx, s, 5, 0)
		assert.ErrorIs(t, err, a2redis.ErrTrimmed)
		tail, err := e.store.ReadTail(e.ctx, s, 100)
		require.NoError(t, err)
		assert.Equal(t, span(21, 30), indexesOf(tail))

		// A trimmed id is free again; a retained one replays.
		again, err := e.store.Append(e.ctx, s, []a2redis.Event{{ID: "ev-05", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, again.Replayed)
		assert.Equal(t, int64(31), again.Events[0].Index, "indexes go on")
		replay, err := e.store.Append(e.ctx, s, []a2redis.Event{{ID: "ev-25", Type: "t", Targets: []a2redis.Target{c}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, replay.Replayed)
		assert.Equal(t, int64(25), replay.Events[0].Index)

		// Nothing more may go: the next head is 21.
		res, err = e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{Floor: 20, Bound: 20}, res)

		// A completion of a trimmed head sent again (its first reply lost)
		// runs nothing: a replay while its row's chunk is kept; the
		// retained heads are claimed in order.
		again5, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: []redisstore.Attempt{redisstore.AttemptOf(first[4])}})
		require.NoError(t, err)
		require.Len(t, again5, 1)
		assert.True(t, again5[0].Replayed, "%+v", again5[0])
		next := handleHeads(t, e, s, 5)
		require.Len(t, next, 5)
		assert.Equal(t, int64(21), next[0].Index)

		// KeepLast: the newest 8 of 31 stay even though 21..25 are done.
		res, err = e.store.Trim(e.ctx, s, redisstore.TrimRequest{KeepLast: 8})
		require.NoError(t, err)
		assert.Equal(t, int64(23), res.Floor)
		assert.Equal(t, span(24, 31), readIndexes(t, e, s, 0))
	})
}

// TestTrimStopsAtWhatConsumersNeed: a dead-lettered head, a head held by a
// claim, a log consumer's position and a reducer's newest snapshot each
// stop a trim below them; OlderThan keeps the young events. Every target.
func TestTrimStopsAtWhatConsumersNeed(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := a2redis.Target{Consumer: "c"}
		trim := func(s string, req redisstore.TrimRequest) int64 {
			t.Helper()
			res, err := e.store.Trim(e.ctx, s, req)
			require.NoError(t, err)
			return res.Floor
		}

		// Dead letter at 3.
		appendEvents(t, e, "dead", 6, nil, c)
		h := handleHeads(t, e, "dead", 2)
		require.Len(t, h, 2)
		cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "dead", Holder: "w", TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "dead", Head: cl.Heads[0].Ref(), Attempt: cl.Heads[0].Attempts, Error: "bad", Permanent: true})
		require.NoError(t, err)
		handleHeads(t, e, "dead", 3)
		assert.Equal(t, int64(2), trim("dead", redisstore.TrimRequest{}), "below the dead letter")

		// A held head at 2 (event heads 3.. handled).
		appendEvents(t, e, "held", 5, nil, c)
		handleHeads(t, e, "held", 1)
		cl, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "held", Holder: "w", TTL: time.Minute, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, int64(2), cl.Heads[0].Index)
		handleHeads(t, e, "held", 3)
		assert.Equal(t, int64(1), trim("held", redisstore.TrimRequest{}), "below the held head")

		// A lane head held at 1: nothing goes.
		_, err = e.store.Append(e.ctx, "lane", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		appendEvents(t, e, "lane", 4, nil)
		_, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "lane", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, int64(0), trim("lane", redisstore.TrimRequest{}), "the lane's head is 1")

		// A reducer's newest snapshot at 4.
		appendEvents(t, e, "snap", 10, nil)
		require.NoError(t, e.store.PutSnapshots(e.ctx, "snap", "r", []redisstore.SnapshotWrite{{Index: 4, State: json.RawMessage(`{"n":4}`)}}))
		assert.Equal(t, int64(4), trim("snap", redisstore.TrimRequest{}), "up to the snapshot")
		st, err := e.store.ReadState(e.ctx, "snap", "r", redisstore.ReadStateOptions{})
		require.NoError(t, err)
		assert.Equal(t, int64(4), st.SnapshotIndex)
		assert.Equal(t, span(5, 10), readIndexes(t, e, "snap", st.SnapshotIndex), "the state's events are retained")

		// OlderThan: 5 events an hour old, 5 new.
		appendEvents(t, e, "age", 5, nil)
		e.clock.Advance(time.Hour)
		appendEvents(t, e, "age", 5, nil)
		assert.Equal(t, int64(5), trim("age", redisstore.TrimRequest{OlderThan: 30 * time.Minute}))
		assert.Equal(t, int64(5), trim("age", redisstore.TrimRequest{OlderThan: 30 * time.Minute}), "the young stay")
		assert.Equal(t, int64(7), trim("age", redisstore.TrimRequest{Through: 7}))
	})
}

// TestTrimFreesMemory: 1,200 untargeted events (no heads: every consumer
// is done with them) trimmed to the newest 10, over several calls of
// TrimPageSize entries: the log holds 10 entries, the id blocks of the
// batches trimmed are gone, a second trim removes nothing, and a
// drop leaves no key (the floor key included). Every target.
func TestTrimFreesMemory(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const s = "big"
		appendEvents(t, e, s, 1200, nil)
		k := keysFor(e, s)
		countKeys := func() (n int, names []string) {
			for _, c := range nodes(e.client) {
				var cursor uint64
				for {
					r, err := c.Do(e.ctx, c.B().Scan().Cursor(cursor).Match(strings.ReplaceAll(k.Base(), "\"", "\\\"")+"*").Count(1000).Build()).AsScanEntry()
					require.NoError(t, err)
					names = append(names, r.Elements...)
					if r.Cursor == 0 {
						break
					}
					cursor = r.Cursor
				}
			}
			return len(names), names
		}
		before, _ := countKeys()
		res, err := e.store.Trim(e.ctx, s, redisstore.TrimRequest{KeepLast: 10})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{Floor: 1190, Removed: 1190, Bound: 1200}, res)
		n, err := e.client.Do(e.ctx, e.client.B().Xlen().Key(k.Log()).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(10), n)
		after, names := countKeys()
		// Three batches of 500, 500 and 200: their blocks go (the last
		// batch's too: it lost events), the floor key comes.
		assert.Equal(t, before-3+1, after, "keys %v", names)
		assert.Equal(t, span(1191, 1200), readIndexes(t, e, s, 0))

		res, err = e.store.Trim(e.ctx, s, redisstore.TrimRequest{KeepLast: 10})
		require.NoError(t, err)
		assert.Equal(t, int64(0), res.Removed)

		_, err = e.store.Drop(e.ctx, s)
		require.NoError(t, err)
		left, names := countKeys()
		assert.Zero(t, left, "keys %v", names)
	})
}

func TestTrimRefusesBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, req := range []redisstore.TrimRequest{{Through: -1}, {KeepLast: -1}, {OlderThan: -time.Second}} {
			_, err := e.store.Trim(e.ctx, "s", req)
			assert.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", req)
		}
		_, err := e.store.Trim(e.ctx, "", redisstore.TrimRequest{})
		assert.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	})
}

// TestRetentionTrims: a retention pass with Trim (and no IdleFor) trims the
// sessions whose oldest event lies past its bounds and leaves the others;
// its dry run reports the same and writes nothing. Every target.
func TestRetentionTrims(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendEvents(t, e, "long", 40, nil)
		appendEvents(t, e, "short", 3, nil)
		appendEvents(t, e, "busy", 40, nil, a2redis.Target{Consumer: "c"}) // nothing handled
		policy := redisstore.RetentionPolicy{Trim: &redisstore.TrimRequest{KeepLast: 10}, DryRun: true, MaxScan: 1 << 30}
		want := []redisstore.SessionTrim{{Session: "long", Floor: 30, Removed: 30}}
		dry, err := e.store.Retention(e.ctx, policy, "")
		require.NoError(t, err)
		assert.Equal(t, want, dry.Trimmed)
		assert.Empty(t, dry.Idle)
		assert.Equal(t, span(1, 40), readIndexes(t, e, "long", 0), "a dry run writes nothing")

		policy.DryRun = false
		res, err := e.store.Retention(e.ctx, policy, "")
		require.NoError(t, err)
		assert.Equal(t, want, res.Trimmed)
		assert.Equal(t, span(31, 40), readIndexes(t, e, "long", 0))
		assert.Equal(t, span(1, 40), readIndexes(t, e, "busy", 0), "its consumer needs every event")
		again, err := e.store.Retention(e.ctx, policy, "")
		require.NoError(t, err)
		assert.Empty(t, again.Trimmed)

		_, err = e.store.Retention(e.ctx, redisstore.RetentionPolicy{Trim: &redisstore.TrimRequest{KeepLast: -1}}, "")
		assert.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	})
}

// TestTrimAndLogConsumers: a registered log consumer that backfills and
// has no cursor in the session yet has passed nothing (no trim); once
// woken, its position bounds the trim; one registered after the trim
// backfills from the retained log. Every target.
func TestTrimAndLogConsumers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const s = "logs"
		events := make([]a2redis.Event, 10)
		for i := range events {
			events[i] = a2redis.Event{Type: []string{"a", "b"}[i%2]}
		}
		_, err := e.store.Append(e.ctx, s, events, redisstore.AppendOptions{})
		require.NoError(t, err)
		g := a2redis.Consumer{Name: "g", Log: &a2redis.LogSpec{Lane: "all", Types: []string{"b"}, Backfill: true}}
		require.NoError(t, e.store.AddConsumers(e.ctx, g))
		res, err := e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{}, res, "g has read nothing yet")

		woken, err := e.store.WakeLog(e.ctx, s, g)
		require.NoError(t, err)
		require.Equal(t, int64(2), woken.Cursor.Head)
		for range 2 {
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{g}})
			require.NoError(t, err)
			require.Len(t, c.Heads, 1)
			_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: s, Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, Consumers: []a2redis.Consumer{g}})
			require.NoError(t, err)
		}
		res, err = e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, int64(4), res.Floor, "through g's position (its head is 6)")

		h := a2redis.Consumer{Name: "h", Log: &a2redis.LogSpec{Lane: "all", Types: []string{"a"}, Backfill: true}}
		require.NoError(t, e.store.AddConsumers(e.ctx, h))
		woken, err = e.store.WakeLog(e.ctx, s, h)
		require.NoError(t, err)
		assert.Equal(t, int64(5), woken.Cursor.Head, "h backfills from the retained log")
	})
}

// TestTrimPastAChunk: 1,100 handled events trimmed whole: the head chunk
// of indexes 1–1000 goes (every row there a finished head's), so a
// completion sent again for one of them is superseded; the rows of the
// floor's own chunk stay, so one there still replays. Every target.
func TestTrimPastAChunk(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const s = "chunks"
		appendEvents(t, e, s, 1100, nil, a2redis.Target{Consumer: "c"})
		var handled []a2redis.HeadEvent
		for len(handled) < 1100 {
			h := handleHeads(t, e, s, redisstore.DefaultMaxBatch)
			require.NotEmpty(t, h)
			handled = append(handled, h...)
		}
		res, err := e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{Floor: 1100, Removed: 1100, Bound: 1100}, res)
		k := keysFor(e, s)
		n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(k.Heads(0)).Build()).AsInt64()
		require.NoError(t, err)
		assert.Zero(t, n, "the chunk of 1–1000 is gone")
		n, err = e.client.Do(e.ctx, e.client.B().Exists().Key(k.Heads(1)).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the floor's chunk stays")

		again := func(h a2redis.HeadEvent) redisstore.CompleteResult {
			r, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
			require.NoError(t, err)
			require.Len(t, r, 1)
			return r[0]
		}
		assert.Equal(t, redisstore.CompleteSuperseded, again(handled[4]).Outcome, "head 5's row is gone")
		last := again(handled[1099])
		assert.Equal(t, redisstore.Completed, last.Outcome)
		assert.True(t, last.Replayed, "head 1100's row stays: a replay")
		b, err := e.store.Bounds(e.ctx, s)
		require.NoError(t, err)
		assert.Equal(t, redisstore.Bounds{Head: 1100, Floor: 1100}, b)
		assert.Empty(t, readIndexes(t, e, s, 0))
	})
}

// TestTrimHeldScanLimit: with scripts.TrimHeldScan + 1 heads held at once a
// trim reads no further and removes nothing; at the limit it goes as far
// as the lowest held head allows. Every target.
func TestTrimHeldScanLimit(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const s = "held"
		limit := scripts.TrimHeldScan
		appendEvents(t, e, s, limit+3, nil, a2redis.Target{Consumer: "c"})
		require.Len(t, handleHeads(t, e, s, 1), 1) // head 1 done: 1 may go
		var held []a2redis.HeadEvent
		for len(held) < limit+1 {
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Hour, Limit: min(redisstore.DefaultMaxBatch, limit+1-len(held))})
			require.NoError(t, err)
			require.NotEmpty(t, c.Heads)
			held = append(held, c.Heads...)
		}
		res, err := e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{}, res, "one past the limit: nothing read, nothing goes")
		_, err = e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: s, Attempts: []redisstore.Attempt{redisstore.AttemptOf(held[len(held)-1])}})
		require.NoError(t, err)
		res, err = e.store.Trim(e.ctx, s, redisstore.TrimRequest{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.TrimResult{Floor: 1, Removed: 1, Bound: 1}, res, "at the limit: up to the lowest held head (2)")
	})
}
