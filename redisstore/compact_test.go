package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/redisstore"
)

// handleAll claims and completes every head of session, 100 at a time.
func handleAll(t *testing.T, e *env, session string) {
	t.Helper()
	for {
		cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 100})
		require.NoError(t, err)
		if len(cl.Heads) == 0 {
			return
		}
		done := make([]redisstore.Attempt, len(cl.Heads))
		for i, h := range cl.Heads {
			done[i] = redisstore.AttemptOf(h)
		}
		res, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done})
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, redisstore.Completed, r.Outcome)
		}
	}
}

// TestCompactionKeepsTheSession: a settled session rebuilt to its size
// (the default) reads, replays and records exactly as before the rebuild,
// on every target; on a real server its log and head chunk are rebuilt
// (the chunk a listpack without its pin, the live count gone), and the
// next claim turns the chunk back into a pinned hashtable. miniredis
// cannot DUMP a stream: there the session is left as it was. A session of
// fewer than rows.ChunkPinFrom events never pins its chunk: a listpack
// from its first row, left as it is by the rebuild.
func TestCompactionKeepsTheSession(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			compactionKeepsTheSession(t, newEnv(t, tg), tg.Name != "miniredis")
		})
	}
}

func compactionKeepsTheSession(t *testing.T, e *env, real bool) {
	const session = "s"
	k := keysFor(e, session)
	mk := func(i int) a2redis.Event {
		return a2redis.Event{ID: "e" + string(rune('a'+i)), Type: "t", Payload: []byte(`{"n":1}`),
			Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "o", Lane: "l"}}}
	}
	encoding := func(what string) string {
		t.Helper()
		enc, err := e.client.Do(e.ctx, e.client.B().ObjectEncoding().Key(k.Heads(0)).Build()).ToString()
		require.NoError(t, err, what)
		return enc
	}
	pinned := func() bool {
		t.Helper()
		pin, err := e.client.Do(e.ctx, e.client.B().Hexists().Key(k.Heads(0)).Field(rows.ChunkPin).Build()).AsBool()
		require.NoError(t, err)
		return pin
	}
	completeClaimed := func(cl redisstore.ClaimResult) {
		t.Helper()
		done := make([]redisstore.Attempt, len(cl.Heads))
		for i, h := range cl.Heads {
			done[i] = redisstore.AttemptOf(h)
		}
		_, err := e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: session, Attempts: done})
		require.NoError(t, err)
	}
	// A small session: never pinned, a listpack while it works.
	small := rows.ChunkPinFrom - 2
	stored := appendN(t, e, session, small, mk)
	cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, cl.Heads, 1)
	assert.False(t, pinned(), "a session below rows.ChunkPinFrom events pins nothing")
	if real {
		assert.Equal(t, "listpack", encoding("a small session's live chunk"))
	}
	completeClaimed(cl)
	handleAll(t, e, session)
	assert.False(t, pinned())
	if real {
		assert.Equal(t, "listpack", encoding("a small session's settled chunk"))
	}

	// Past rows.ChunkPinFrom events: pinned while live, rebuilt at settle.
	total := rows.ChunkPinFrom + 1
	for i := small; i < total; i++ {
		stored = append(stored, appendN(t, e, session, 1, func(int) a2redis.Event { return mk(i) })...)
	}
	cl, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, cl.Heads, 1)
	assert.True(t, pinned(), "a session past rows.ChunkPinFrom events pins its chunk")
	if real {
		assert.Equal(t, "hashtable", encoding("a big session's live chunk"))
	}
	completeClaimed(cl)
	handleAll(t, e, session)
	assert.Equal(t, !real, pinned(), "the settled chunk's pin (gone where the session was rebuilt)")
	// A live count of 0 is no key where the session was rebuilt (a
	// completion that settles deletes it); elsewhere it may read "0".
	live, err := e.client.Do(e.ctx, e.client.B().Get().Key(k.Live()).Build()).ToString()
	if real || err != nil {
		assert.True(t, rueidis.IsRedisNil(err), "the live count of 0 is no key: %q %v", live, err)
	} else {
		assert.Equal(t, "0", live, "the live count")
	}
	if real {
		assert.Equal(t, "listpack", encoding("the settled chunk"))
		used, err := e.client.Do(e.ctx, e.client.B().MemoryUsage().Key(k.Log()).Samples(0).Build()).AsInt64()
		require.NoError(t, err)
		assert.Less(t, used, int64(2048), "the log rebuilt to its size")
	}
	// Reads, records and replays as before.
	read, err := e.store.Read(e.ctx, session, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, stored, read)
	for _, ref := range []a2redis.HeadRef{{Consumer: "c", Index: 3}, {Consumer: "o", Lane: "l", Index: int64(total)}} {
		rec, err := e.store.HeadRecord(e.ctx, session, ref)
		require.NoError(t, err)
		assert.True(t, rec.Done, "%v", ref)
		assert.Equal(t, int64(1), rec.Attempt, "%v", ref)
	}
	replay := make([]a2redis.Event, small)
	for i := range replay {
		replay[i] = mk(i)
	}
	again, err := e.store.Append(e.ctx, session, replay, redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.Equal(t, stored[:small], again.Events, "a replay of the batch")
	cursors, err := e.store.Cursors(e.ctx, session)
	require.NoError(t, err)
	for _, c := range cursors {
		assert.Equal(t, int64(total), c.Position, "%+v", c)
	}

	// The session goes on: indexes stay dense, the chunk is pinned again
	// as soon as a head is written, and the next settle rebuilds it.
	more, err := e.store.Append(e.ctx, session, []a2redis.Event{mk(total), mk(total + 1)}, redisstore.AppendOptions{})
	require.NoError(t, err)
	require.Len(t, more.Events, 2)
	assert.Equal(t, int64(total+1), more.Events[0].Index)
	cl, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, cl.Heads, 3, "two event heads and the lane's next")
	assert.True(t, pinned())
	if real {
		assert.Equal(t, "hashtable", encoding("a chunk with live heads"))
	}
	handleAll(t, e, session)
	read, err = e.store.Read(e.ctx, session, 0, 0)
	require.NoError(t, err)
	require.Len(t, read, total+2)
	for i, ev := range read {
		assert.Equal(t, int64(i+1), ev.Index)
	}
}

// TestCompactionSkipsBigLogs: a session whose log is past the rebuild's
// bounds, settled by writes other than a completion (dead letters: a
// completion rebuilds the session in its own call, one XLEN a settle), is
// asked once (compact_log replies that it is too big) and not again at its
// next settles; once this store reclaimed its past, its new lifetime is
// rebuilt again. Counted by the server: compact_log is the only script
// here with an XLEN.
func TestCompactionSkipsBigLogs(t *testing.T) {
	c := privateServer(t)
	e := &env{t: t, ctx: context.Background(), client: c, prefix: "big"}
	var err error
	e.store, err = redisstore.New(e.ctx, c, redisstore.Config{Prefix: e.prefix, ConsumerRefresh: -1})
	require.NoError(t, err)
	target := func(int) a2redis.Event {
		return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
	}
	rebuilds := func() int64 { return commandStats(e.ctx, t, c)["xlen"] }
	resetStats(e.ctx, t, c)
	appendN(t, e, "s", redisstore.CompactLogEntries+1, target)
	deadLetterAll(t, e, "s")
	assert.Equal(t, int64(1), rebuilds(), "the first settle asks")
	for range 3 {
		appendN(t, e, "s", 1, target)
		deadLetterAll(t, e, "s")
	}
	assert.Equal(t, int64(1), rebuilds(), "later settles of the big log do not")
	_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
	require.NoError(t, err)
	_, err = e.store.Reclaim(e.ctx, "s")
	require.NoError(t, err)
	resetStats(e.ctx, t, c)
	appendN(t, e, "s", 1, target)
	deadLetterAll(t, e, "s")
	assert.Equal(t, int64(1), rebuilds(), "the new lifetime is rebuilt")
	used, err := c.Do(e.ctx, c.B().MemoryUsage().Key(keysFor(e, "s").Log()).Samples(0).Build()).AsInt64()
	require.NoError(t, err)
	assert.Less(t, used, int64(2048), "the new lifetime's log, rebuilt")
}

// deadLetterAll claims every head of the session and fails each for good.
func deadLetterAll(t *testing.T, e *env, session string) {
	t.Helper()
	for {
		cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 100})
		require.NoError(t, err)
		if len(cl.Heads) == 0 {
			return
		}
		for _, h := range cl.Heads {
			r, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "x", Permanent: true})
			require.NoError(t, err)
			require.Equal(t, redisstore.DeadLettered, r.Outcome)
		}
	}
}
