package redisstore_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

func appendN(t *testing.T, e *env, session string, n int, mk func(i int) a2redis.Event) []a2redis.StoredEvent {
	t.Helper()
	batch := make([]a2redis.Event, n)
	for i := range batch {
		if mk != nil {
			batch[i] = mk(i)
		} else {
			batch[i] = a2redis.Event{Type: "t", ID: session + "-" + strconv.Itoa(i)}
		}
	}
	var stored []a2redis.StoredEvent
	targets := 0
	first := 0
	// In batches within MaxBatch events and MaxBatchTargets targets.
	for i := 0; i <= len(batch); i++ {
		if i == len(batch) || i-first == redisstore.DefaultMaxBatch || targets+len(batch[i].Targets) > a2redis.MaxBatchTargets {
			if i > first {
				res, err := e.store.Append(e.ctx, session, batch[first:i], redisstore.AppendOptions{})
				require.NoError(t, err)
				stored = append(stored, res.Events...)
			}
			first, targets = i, 0
		}
		if i < len(batch) {
			targets += len(batch[i].Targets)
		}
	}
	return stored
}

// sessionKeys lists every key of a session (SCAN over every node).
func sessionKeys(t *testing.T, e *env, session string) []string {
	t.Helper()
	pattern := keys.EscapeGlob(keysFor(e, session).Base()) + "*"
	var out []string
	for _, c := range nodes(e.client) {
		var cursor uint64
		for {
			entry, err := c.Do(e.ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			out = append(out, entry.Elements...)
			if entry.Cursor == 0 {
				break
			}
			cursor = entry.Cursor
		}
	}
	return out
}

func TestClearAndRead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 3, nil)
		r, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: true, Index: 4, ClearIndex: 4}, r)

		// Reads start at the marker.
		got, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, a2redis.ClearEventType, got[0].Type)

		// Ids of the past lifetime are free again.
		again := appendN(t, e, "s", 2, nil)
		assert.Equal(t, int64(5), again[0].Index)
		got, err = e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, []int64{4, 5, 6}, indexes(got))

		// Scheduled work from before the clear is refused.
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{OriginIndex: 3})
		require.ErrorIs(t, err, a2redis.ErrSessionCleared)
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{OriginIndex: 5})
		require.NoError(t, err)

		// Clearing an empty session, or a cleared one, is a no-op success.
		r, err = e.store.Clear(e.ctx, "empty", redisstore.ClearOptions{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: true}, r)
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		r, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: true, Index: 8, ClearIndex: 8}, r)
	})
}

func TestConditionalClear(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 2, nil)
		two, three := int64(2), int64(3)
		r, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &three})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: false, Index: 2}, r)
		r, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &two})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, r)
		// A retry of the same conditional clear reports it cleared.
		r, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{IfLastIndex: &two})
		require.NoError(t, err)
		assert.Equal(t, redisstore.ClearResult{Cleared: true, Index: 3, ClearIndex: 3}, r)
	})
}

func TestReclaim(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1200, nil)
		before := len(sessionKeys(t, e, "s"))
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		appendN(t, e, "s", 2, func(i int) a2redis.Event { return a2redis.Event{ID: "s-" + strconv.Itoa(i), Type: "t"} })

		// Two reclaims at once: each takes the next page; together they
		// delete every old entry exactly once.
		var wg sync.WaitGroup
		results := make([]redisstore.ReclaimResult, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = e.store.Reclaim(e.ctx, "s")
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		assert.True(t, results[0].Done && results[1].Done)
		assert.Equal(t, int64(1200), results[0].Deleted+results[1].Deleted)

		// The reused ids keep their new owners; the old ones are gone.
		ks := sessionKeys(t, e, "s")
		assert.Less(t, len(ks), before)
		idKeys := 0
		for _, k := range ks {
			if strings.Contains(k, ":id:") {
				idKeys++
			}
		}
		assert.Equal(t, 3, idKeys, "the marker's id and the two new ids: %v", ks)
		res, err := e.store.Append(e.ctx, "s", []a2redis.Event{{ID: "s-0", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, res.Replayed)
		assert.Equal(t, int64(1202), res.Events[0].Index)

		got, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, []int64{1201, 1202, 1203}, indexes(got))

		// Reclaim again is a no-op.
		r, err := e.store.Reclaim(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, redisstore.ReclaimResult{Done: true}, r)
	})
}

func TestReclaimCollapsesAnEmptyLifetime(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 10, func(i int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "l", Lane: "x"}}}
		})
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		before, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, before, 1, "the marker")
		_, err = e.store.Reclaim(e.ctx, "s")
		require.NoError(t, err)
		ks := sessionKeys(t, e, "s")
		assert.Equal(t, []string{keysFor(e, "s").Clear()}, ks,
			"an empty lifetime collapses to its marker, in its clear key alone (its ready-index record goes, and its shard forgets it)")
		// The marker reads as it did from the log, id and time included.
		after, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, before, after, "Read across the collapsed marker")
		tail, err := e.store.ReadTail(e.ctx, "s", 5)
		require.NoError(t, err)
		assert.Equal(t, before, tail, "ReadTail of the collapsed session")
		shard := keys.ReadyFor(e.prefix, keys.ReadyShard("s", e.store.ReadyShards()))
		known, err := e.client.Do(e.ctx, e.client.B().Hexists().Key(shard.Versions()).Field("s").Build()).AsBool()
		require.NoError(t, err)
		assert.False(t, known, "the shard forgot the collapsed session's version")
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, redisstore.Bounds{Head: 11, ClearIndex: 11}, b)
		got, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, []int64{11}, indexes(got))
		more := appendN(t, e, "s", 1, nil)
		assert.Equal(t, int64(12), more[0].Index)
		// A new lifetime after the collapse: the marker still reads first.
		got, err = e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, append(before, more...), got)
		tail, err = e.store.ReadTail(e.ctx, "s", 5)
		require.NoError(t, err)
		assert.Equal(t, append(before, more...), tail)
		tail, err = e.store.ReadTail(e.ctx, "s", 1)
		require.NoError(t, err)
		assert.Equal(t, more, tail)
	})
}

// A marker whose id is not the store's own (Config.IDs) collapses with its
// id as it is, and reads back the same; an ended session's retention by
// Drop finds it by its clear key alone.
func TestCollapseKeepsAnyMarkerID(t *testing.T) {
	var n atomic.Int64
	ids := func() string { return fmt.Sprintf("custom:id;%d", n.Add(1)) }
	eachWith(t, func(c *redisstore.Config) { c.IDs = ids }, func(t *testing.T, e *env) {
		appendN(t, e, "s", 3, nil)
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		before, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		_, err = e.store.Reclaim(e.ctx, "s")
		require.NoError(t, err)
		require.Equal(t, []string{keysFor(e, "s").Clear()}, sessionKeys(t, e, "s"))
		after, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Equal(t, before, after)
		require.Contains(t, after[0].ID, "custom:id;")

		e.clock.Advance(2 * time.Hour)
		policy := redisstore.RetentionPolicy{IdleFor: time.Hour, Drop: true, MaxScan: 1 << 30, ScanPage: 20_000}
		r, err := e.store.Retention(e.ctx, policy, "")
		require.NoError(t, err)
		require.Contains(t, r.Idle, "s", "the ended session, found by its clear key")
		require.Empty(t, sessionKeys(t, e, "s"), "dropped")
	})
}

func TestReadAcrossAClearRetriesFromTheMarker(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 600, nil)
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		appendN(t, e, "s", 3, func(i int) a2redis.Event { return a2redis.Event{Type: "n"} })
		_, err = e.store.Reclaim(e.ctx, "s")
		require.NoError(t, err)
		// A reader resuming inside the old lifetime starts at the marker.
		got, err := e.store.Read(e.ctx, "s", 10, 0)
		require.NoError(t, err)
		assert.Equal(t, []int64{601, 602, 603, 604}, indexes(got))
	})
}

// A big past lifetime is swept over several script calls, each bounded:
// 3000 lane cursors (9000 record fields), a type index of 3000 entries and
// three head chunks. The sweep's progress lives under the sweep key, a
// newer clear in the middle starts it over, ReclaimPage goes on from where
// a call stopped, and the end is what a one-call sweep leaves: only the
// marker and the log cursor's record.
func TestReclaimSweepsInPages(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const lanes = 3000
		audit := a2redis.Consumer{Name: "audit", Log: &a2redis.LogSpec{Lane: "all", Types: []string{"t"}}}
		batch := make([]a2redis.Event, lanes)
		for i := range batch {
			batch[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "l" + strconv.Itoa(i)}}}
		}
		for part := range slices.Chunk(batch, redisstore.DefaultMaxBatch) {
			_, err := e.store.Append(e.ctx, "s", part, redisstore.AppendOptions{Consumers: []a2redis.Consumer{audit, {Name: "c"}}})
			require.NoError(t, err)
		}
		for range 2 {
			c := claim(t, e, redisstore.ClaimRequest{Limit: redisstore.DefaultMaxBatch})
			completeAll(t, e, "s", c.Heads) // head rows in chunks 0 to 2
		}
		k := keysFor(e, "s")
		n, err := e.client.Do(e.ctx, e.client.B().Zcard().Key(k.Type("t")).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(lanes), n, "the log cursor's type index")

		// One reclaim script call: entries deleted, and "1" done, "0" more
		// log pages, "s" the sweep goes on.
		script := scripts.All()["reclaim"].Lua(false)
		step := func() (int64, string) {
			reply, err := script.Exec(e.ctx, e.client, []string{k.Count()}, []string{strconv.Itoa(redisstore.ReclaimPageSize)}).ToArray()
			require.NoError(t, err)
			require.Len(t, reply, 2)
			deleted, err := reply[0].AsInt64()
			require.NoError(t, err)
			state, err := reply[1].ToString()
			if err != nil {
				n, err := reply[1].AsInt64()
				require.NoError(t, err)
				state = strconv.FormatInt(n, 10)
			}
			return deleted, state
		}

		// A sweep under way, then another clear: the sweep starts over.
		first, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		for {
			deleted, state := step()
			require.NotEqual(t, "1", state)
			if deleted == 0 {
				require.Equal(t, "s", state)
				break // a call that only sweeps
			}
		}
		progress, err := e.client.Do(e.ctx, e.client.B().Get().Key(k.Sweep()).Build()).ToString()
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(progress, strconv.FormatInt(first.Index, 10)+":"), "the sweep key names the marker: %q", progress)
		appendN(t, e, "s", 1, func(int) a2redis.Event { return a2redis.Event{Type: "u"} })
		second, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		deleted, state := step()
		assert.Equal(t, int64(2), deleted, "the first marker and the event after it")
		assert.Equal(t, "s", state)
		if !strings.HasSuffix(t.Name(), "/miniredis") { // its HSCAN returns a whole hash at once
			for range 3 {
				deleted, state = step()
				require.Equal(t, int64(0), deleted)
				require.Equal(t, "s", state, "9000 record fields sweep in pieces of about scripts.SweepBudget")
			}
		}
		r, err := e.store.ReclaimPage(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, redisstore.ReclaimResult{Done: true}, r, "ReclaimPage finishes the sweep")

		ks := sessionKeys(t, e, "s")
		assert.ElementsMatch(t, []string{k.Clear(), k.Cursors()}, ks, "the lifetime collapsed to its marker (in its clear key)")
		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, cursors, 1)
		assert.Equal(t, a2redis.Cursor{Consumer: "audit", Kind: a2redis.LogCursor, Lane: "all", Position: second.Index}, cursors[0])
		fields, err := e.client.Do(e.ctx, e.client.B().Hlen().Key(k.Cursors()).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(3), fields, "the log cursor's h, p and ty: every lane record went")
		_, state = step()
		assert.Equal(t, "1", state, "a finished session does nothing")
	})
}
