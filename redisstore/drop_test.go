package redisstore_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// assertForgotten: the session has no key on any node, and its shard of the
// ready index holds neither an entry nor a version for it.
func assertForgotten(t *testing.T, e *env, session string) {
	t.Helper()
	assert.Empty(t, sessionKeys(t, e, session), "keys left by the drop")
	r := keys.ReadyFor(e.prefix, keys.ReadyShard(session, e.store.ReadyShards()))
	err := e.client.Do(e.ctx, e.client.B().Hget().Key(r.Versions()).Field(session).Build()).Error()
	assert.True(t, rueidis.IsRedisNil(err), "a ready version is left (%v)", err)
	err = e.client.Do(e.ctx, e.client.B().Zscore().Key(r.Index()).Member(session).Build()).Error()
	assert.True(t, rueidis.IsRedisNil(err), "a ready entry is left (%v)", err)
}

func TestDropLeavesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const session = "doomed"
		// Two heads chunks, generated id blocks and explicit ids, types.
		appendN(t, e, session, 1200, func(i int) a2redis.Event {
			return a2redis.Event{Type: fmt.Sprintf("t%d", i%3), Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "l", Lane: "x"}}}
		})
		appendN(t, e, session, 5, nil)
		// A claim, a completion, a dead letter, a snapshot with a pin,
		// presence, a log cursor.
		cl, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute, Limit: 3})
		require.NoError(t, err)
		require.Len(t, cl.Heads, 3)
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: cl.Heads[0].Ref(), Attempt: cl.Heads[0].Attempts})
		require.NoError(t, err)
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: session, Head: cl.Heads[1].Ref(), Attempt: cl.Heads[1].Attempts, Error: "x", MaxFailures: 1})
		require.NoError(t, err)
		require.NoError(t, e.store.PutSnapshots(e.ctx, session, "r", []redisstore.SnapshotWrite{
			{Index: cl.Heads[2].Index, State: []byte(`{"n":1}`), Pins: []a2redis.HeadRef{cl.Heads[2].Ref()}},
		}))
		_, err = e.store.PresenceSet(e.ctx, session, redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": []byte(`1`)}, Seen: 1, At: e.clock.Now(), TTL: time.Minute})
		require.NoError(t, err)
		_, err = e.store.WakeLog(e.ctx, session, a2redis.Consumer{Name: "g", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"t1"}, Backfill: true}})
		require.NoError(t, err)
		before, err := e.store.ReadyAt(e.ctx, session)
		require.NoError(t, err)
		require.True(t, before.Listed, "the session is in the ready index before the drop")

		res, err := e.store.Drop(e.ctx, session)
		require.NoError(t, err)
		assert.Equal(t, redisstore.DropResult{Dropped: true, ClearIndex: 1206, Deleted: 1205}, res)
		assertForgotten(t, e, session)

		// The claim from before the drop names an event the session no
		// longer has, and writes nothing.
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: cl.Heads[2].Ref(), Attempt: cl.Heads[2].Attempts})
		require.ErrorIs(t, err, a2redis.ErrNoEvent)
		assertForgotten(t, e, session)

		// A fresh session starts at index 1 and is listed again.
		again := appendN(t, e, session, 1, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
		})
		assert.Equal(t, int64(1), again[0].Index)
		after, err := e.store.ReadyAt(e.ctx, session)
		require.NoError(t, err)
		assert.True(t, after.Listed, "the fresh session is in the ready index")

		// Dropping again, and dropping a session that never was.
		res, err = e.store.Drop(e.ctx, session)
		require.NoError(t, err)
		assert.True(t, res.Dropped)
		assertForgotten(t, e, session)
		res, err = e.store.Drop(e.ctx, "never")
		require.NoError(t, err)
		assert.Equal(t, redisstore.DropResult{Dropped: true}, res)
		assertForgotten(t, e, "never")
	})
}

// TestDropRacesAppends: appends racing a drop each end either before it
// (dropped with the session) or after it (kept, readable, in order), never
// half: counted, none lost, none duplicated.
func TestDropRacesAppends(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const session = "raced"
		for round := 0; round < 5; round++ {
			appendN(t, e, session, 300, func(i int) a2redis.Event {
				return a2redis.Event{Type: "t", ID: fmt.Sprintf("r%d-pre-%d", round, i), Targets: []a2redis.Target{{Consumer: "c"}}}
			})
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				appended = map[string]int64{}
				stop     = make(chan struct{})
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-race-%d", round, i)
					res, err := e.store.Append(e.ctx, session, []a2redis.Event{{Type: "t", ID: id, Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					appended[id] = res.Events[0].Index
					mu.Unlock()
				}
			}()
			res, err := e.store.Drop(e.ctx, session)
			close(stop)
			wg.Wait()
			require.NoError(t, err)

			stored, err := e.store.Read(e.ctx, session, 0, 0)
			require.NoError(t, err)
			at := map[string]int64{}
			for _, ev := range stored {
				if ev.Type != a2redis.ClearEventType {
					at[ev.ID] = ev.Index
				}
			}
			kept, dropped := 0, 0
			for id, index := range appended {
				if res.Dropped || index <= res.ClearIndex {
					// Before the drop, or before a drop that finished
					// before it and so started a fresh session.
					dropped++
					continue
				}
				kept++
				assert.Equal(t, index, at[id], "append %s after the drop's clear is kept where it was told", id)
			}
			// Everything stored is an append the race made (none from
			// before the drop, none twice).
			for id, index := range at {
				got, ok := appended[id]
				if assert.True(t, ok, "%s stored but not appended after the drop", id) {
					assert.Equal(t, got, index)
				}
			}
			if res.Dropped {
				// Appends after a finished drop start at 1.
				assert.Equal(t, len(at), len(stored))
				for _, ev := range stored {
					assert.LessOrEqual(t, ev.Index, int64(len(stored)))
				}
			} else {
				assert.Equal(t, kept, len(at), "kept appends are all stored")
			}
			t.Logf("round %d: dropped=%v clear=%d appends dropped=%d kept=%d stored after=%d", round, res.Dropped, res.ClearIndex, dropped, kept, len(at))
			// Leave the next round a clean slate.
			for {
				res, err := e.store.Drop(e.ctx, session)
				require.NoError(t, err)
				if res.Dropped {
					break
				}
			}
			assertForgotten(t, e, session)
		}
	})
}
