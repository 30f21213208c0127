package redisstore_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// A batch appended without ids is recorded as one id block: its ids share
// a nonce, and there is no id key per event.
func TestGeneratedIDsShareOneBlock(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		batch := make([]a2redis.Event, 20)
		for i := range batch {
			batch[i] = ev("t", `1`)
		}
		res, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		nonce := res.Events[0].ID[:24]
		for i, stored := range res.Events {
			require.Regexp(t, generatedID, stored.ID)
			assert.Equal(t, fmt.Sprintf("%s%08x", nonce, i), stored.ID)
		}
		got, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, res.Events, got)

		k := keysFor(e, "s")
		record, err := e.client.Do(e.ctx, e.client.B().Get().Key(k.IDBlock(nonce)).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "1:20", record)
		n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(k.ID(res.Events[0].ID), k.ID(res.Events[19].ID)).Build()).AsInt64()
		require.NoError(t, err)
		assert.Zero(t, n, "generated ids have no id key of their own")

		// Another batch gets another nonce; a batch of one is recorded
		// under its id key, as any id.
		more, err := e.store.Append(e.ctx, "s", []a2redis.Event{ev("t", `2`)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, nonce, more.Events[0].ID[:24])
		assert.Equal(t, int64(21), more.Events[0].Index)
		one, err := e.client.Do(e.ctx, e.client.B().Get().Key(k.ID(more.Events[0].ID)).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "21", one)
		n, err = e.client.Do(e.ctx, e.client.B().Exists().Key(k.IDBlock(more.Events[0].ID[:24])).Build()).AsInt64()
		require.NoError(t, err)
		assert.Zero(t, n)
		again, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: more.Events[0].ID, Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, again.Replayed)
	})
}

// A generated id sent back explicitly is the stored event's, exactly as an
// id with a key of its own would be.
func TestGeneratedIDsDeduplicate(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res, err := e.store.Append(e.ctx, "s", []a2redis.Event{ev("a", `1`), ev("b", `2`), ev("c", `3`)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		ids := []string{res.Events[0].ID, res.Events[1].ID, res.Events[2].ID}

		// Stored ids again, in another order: a replay.
		again, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{ID: ids[2], Type: "c"}, {ID: ids[0], Type: "a"},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, again.Replayed)
		assert.Equal(t, []a2redis.StoredEvent{res.Events[2], res.Events[0]}, again.Events)

		// One of them with a new id: a partial duplicate, nothing written.
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{ID: ids[1], Type: "b"}, {ID: "new", Type: "b"}}, redisstore.AppendOptions{})
		require.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)

		// The block's nonce with a position past the batch is a new id, and
		// so is an id of another shape that starts with the nonce.
		past := ids[0][:24] + "00000003"
		upper := ids[0][:24] + "0000000A"
		fresh, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: past, Type: "d"}, {ID: upper, Type: "d"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, fresh.Replayed)
		assert.Equal(t, []int64{4, 5}, []int64{fresh.Events[0].Index, fresh.Events[1].Index})
		replay, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: past, Type: "d"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, replay.Replayed)
		assert.Equal(t, int64(4), replay.Events[0].Index)

		// A handler returning an event under a stored generated id clashes.
		_, err = e.store.Append(e.ctx, "w", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		work, err := e.store.Append(e.ctx, "w", []a2redis.Event{ev("x", `1`)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "w", Holder: "h", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 1)
		h := claim.Heads[0]
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{
			Session: "w", Head: h.Ref(), Attempt: h.Attempts,
			Events: []a2redis.Event{{ID: work.Events[0].ID, Type: "y"}, {Type: "y"}},
		})
		require.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)
	})
}

// Coalesced rounds mix block batches and batches with ids; within a round a
// later batch sees what an earlier one wrote.
func TestGeneratedIDsInCoalescedRounds(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const producers = 16
		errs := make(chan error, producers)
		results := make(chan redisstore.AppendResult, producers)
		for p := range producers {
			go func() {
				batch := []a2redis.Event{ev("t", `1`), ev("t", `2`)}
				if p%4 == 0 {
					batch[0].ID = fmt.Sprintf("own-%d", p)
				}
				res, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
				errs <- err
				results <- res
			}()
		}
		seen := map[string]int64{}
		for range producers {
			require.NoError(t, <-errs)
			res := <-results
			require.Len(t, res.Events, 2)
			assert.Equal(t, res.Events[0].Index+1, res.Events[1].Index, "a batch stays contiguous")
			for _, stored := range res.Events {
				seen[stored.ID] = stored.Index
			}
		}
		require.Len(t, seen, 2*producers)
		got, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 2*producers)
		for _, stored := range got {
			assert.Equal(t, seen[stored.ID], stored.Index)
		}
		// Every id replays.
		for _, stored := range got {
			res, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: stored.ID, Type: "t"}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			require.True(t, res.Replayed, stored.ID)
			assert.Equal(t, stored.Index, res.Events[0].Index)
		}
	})
}

// After a clear a generated id is free again; reclaiming the old lifetime
// deletes its block but keeps the id's new owner.
func TestGeneratedIDsAcrossClearAndReclaim(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res, err := e.store.Append(e.ctx, "s", []a2redis.Event{ev("t", `1`), ev("t", `2`)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		nonce := res.Events[0].ID[:24]
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)

		reused, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: res.Events[1].ID, Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, reused.Replayed, "ids below the clear are free again")
		assert.Equal(t, int64(4), reused.Events[0].Index)

		for {
			r, err := e.store.Reclaim(e.ctx, "s")
			require.NoError(t, err)
			if r.Done {
				break
			}
		}
		k := keysFor(e, "s")
		n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(k.IDBlock(nonce)).Build()).AsInt64()
		require.NoError(t, err)
		assert.Zero(t, n, "reclaim deletes the old lifetime's block")
		again, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: res.Events[1].ID, Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, again.Replayed)
		assert.Equal(t, int64(4), again.Events[0].Index)
		fresh, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: res.Events[0].ID, Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, fresh.Replayed)
	})
}

// A configured id generator keeps one id key per event.
func TestConfiguredIDsKeepIDKeys(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tg, func(c *redisstore.Config) { c.IDs = redisstore.RandomID })
			res, err := e.store.Append(e.ctx, "s", []a2redis.Event{ev("t", `1`), ev("t", `2`)}, redisstore.AppendOptions{})
			require.NoError(t, err)
			assert.NotEqual(t, res.Events[0].ID[:24], res.Events[1].ID[:24])
			k := keysFor(e, "s")
			n, err := e.client.Do(e.ctx, e.client.B().Exists().Key(k.ID(res.Events[0].ID), k.ID(res.Events[1].ID)).Build()).AsInt64()
			require.NoError(t, err)
			assert.Equal(t, int64(2), n)
		})
	}
}
