package redisstore_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

func snap(index int64, state string, pins ...a2redis.HeadRef) redisstore.SnapshotWrite {
	return redisstore.SnapshotWrite{Index: index, State: json.RawMessage(state), Pins: pins}
}

func putSnaps(t *testing.T, e *env, writes ...redisstore.SnapshotWrite) {
	t.Helper()
	require.NoError(t, e.store.PutSnapshots(e.ctx, "s", "r", writes))
}

func readState(t *testing.T, e *env, through int64) redisstore.State {
	t.Helper()
	st, err := e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{Through: through})
	require.NoError(t, err)
	return st
}

// history returns the reducer's history zset as index → state.
func history(t *testing.T, e *env) map[int64]string {
	t.Helper()
	c := e.client
	members, err := c.Do(e.ctx, c.B().Zrange().Key(keysFor(e, "s").SnapHistory("r")).Min("0").Max("-1").Withscores().Build()).AsZScores()
	require.NoError(t, err)
	out := map[int64]string{}
	for _, m := range members {
		var v struct {
			Index int64           `json:"index"`
			State json.RawMessage `json:"state"`
		}
		require.NoError(t, json.Unmarshal([]byte(m.Member), &v))
		require.Equal(t, int64(m.Score), v.Index)
		out[v.Index] = string(v.State)
	}
	return out
}

func pinCounts(t *testing.T, e *env) map[string]string {
	t.Helper()
	c := e.client
	m, err := c.Do(e.ctx, c.B().Hgetall().Key(keysFor(e, "s").Pins()).Build()).AsStrMap()
	require.NoError(t, err)
	return m
}

func targeted(consumer, lane string) func(int) a2redis.Event {
	return func(int) a2redis.Event {
		return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: consumer, Lane: lane}}}
	}
}

func TestSnapshotHeadMovesOnlyForward(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		st := readState(t, e, 0)
		assert.Equal(t, redisstore.State{}, st, "nothing stored yet")

		appendN(t, e, "s", 5, nil)
		putSnaps(t, e, snap(2, `{"n":2}`))
		st = readState(t, e, 0)
		assert.Equal(t, redisstore.State{Snapshot: json.RawMessage(`{"n":2}`), SnapshotIndex: 2, Head: 5}, st)

		// An older write never moves the head back, and unpinned it is
		// not kept.
		putSnaps(t, e, snap(1, `{"n":1}`))
		st = readState(t, e, 0)
		assert.Equal(t, int64(2), st.SnapshotIndex)
		assert.Nil(t, readState(t, e, 1).Snapshot)
		assert.Empty(t, history(t, e))

		// Forward; the same index again replaces the state.
		putSnaps(t, e, snap(4, `{"n":4}`))
		putSnaps(t, e, snap(4, `{"n":"4b"}`))
		st = readState(t, e, 0)
		assert.Equal(t, `{"n":"4b"}`, string(st.Snapshot))
		assert.Equal(t, int64(4), st.SnapshotIndex)
		assert.Empty(t, history(t, e), "an unpinned head that moves on is dropped")
		assert.Nil(t, readState(t, e, 3).Snapshot)
		assert.Equal(t, int64(4), readState(t, e, 4).SnapshotIndex)

		// One call: the newest becomes the head, duplicates merge (last
		// state wins), the state is stored verbatim.
		putSnaps(t, e, snap(5, `{"n":5}`), snap(3, `{"n":3}`), snap(5, "[1, 2.50,\n 3]"))
		st = readState(t, e, 0)
		assert.Equal(t, "[1, 2.50,\n 3]", string(st.Snapshot))
		assert.Equal(t, int64(5), st.SnapshotIndex)
		putSnaps(t, e, snap(6, `null`))
		st = readState(t, e, 0)
		assert.Equal(t, "null", string(st.Snapshot))
		assert.Equal(t, int64(6), st.SnapshotIndex)

		// An empty batch is a no-op.
		require.NoError(t, e.store.PutSnapshots(e.ctx, "s", "r", nil))
	})
}

func TestSnapshotHistoryLivesWhilePinned(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 4, targeted("c", ""))
		c1 := a2redis.HeadRef{Consumer: "c", Index: 1}
		c2 := a2redis.HeadRef{Consumer: "c", Index: 2}
		c3 := a2redis.HeadRef{Consumer: "c", Index: 3}

		// Pinned by unclaimed heads (their cursors are runnable).
		putSnaps(t, e, snap(1, `"s1"`, c1), snap(2, `"s2"`, c2), snap(3, `"s3"`, c3), snap(4, `"s4"`))
		assert.Equal(t, map[int64]string{1: `"s1"`, 2: `"s2"`, 3: `"s3"`}, history(t, e))
		assert.Len(t, pinCounts(t, e), 3)
		assert.Equal(t, `"s2"`, string(readState(t, e, 2).Snapshot))
		assert.Equal(t, `"s4"`, string(readState(t, e, 0).Snapshot))

		// Another write at a pinned index keeps the pin and takes the
		// state; pins of one index merge.
		putSnaps(t, e, snap(1, `"s1b"`), snap(1, `"s1c"`, c1, c1))
		assert.Equal(t, `"s1c"`, history(t, e)[1])
		assert.Equal(t, "1", pinCounts(t, e)[pinRef(e, 1)])

		heads := claim(t, e, redisstore.ClaimRequest{}).Heads
		require.Equal(t, []string{"c/@1", "c/@2", "c/@3", "c/@4"}, refs(heads))

		// Completing the pinning head releases its snapshot.
		complete(t, e, heads[0])
		assert.Equal(t, map[int64]string{2: `"s2"`, 3: `"s3"`}, history(t, e))
		assert.Nil(t, readState(t, e, 1).Snapshot)

		// Dead-lettering releases it too, and a dead-lettered head pins
		// nothing.
		f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c2, Attempt: heads[1].Attempts, MaxFailures: 1})
		require.NoError(t, err)
		require.Equal(t, redisstore.DeadLettered, f.Outcome)
		assert.Equal(t, map[int64]string{3: `"s3"`}, history(t, e))
		putSnaps(t, e, snap(2, `"s2"`, c2))
		assert.Equal(t, map[int64]string{3: `"s3"`}, history(t, e))

		// A redriven head pins again; dead-lettered and skipped, it is
		// released and the cursor moves on.
		_, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Index: 2, Action: redisstore.Retry})
		require.NoError(t, err)
		putSnaps(t, e, snap(2, `"s2"`, c2))
		assert.Equal(t, map[int64]string{2: `"s2"`, 3: `"s3"`}, history(t, e))
		again := claim(t, e, redisstore.ClaimRequest{})
		require.Equal(t, []string{"c/@2"}, refs(again.Heads))
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c2, Attempt: again.Heads[0].Attempts, MaxFailures: 1})
		require.NoError(t, err)
		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Index: 2, Action: redisstore.Skip})
		require.NoError(t, err)
		require.True(t, rd.Redriven)
		assert.Equal(t, map[int64]string{3: `"s3"`}, history(t, e))
		putSnaps(t, e, snap(2, `"s2"`, c2))
		assert.Equal(t, map[int64]string{3: `"s3"`}, history(t, e), "a skipped head pins nothing")

		// A completed head pins nothing either.
		putSnaps(t, e, snap(1, `"s1"`, c1))
		assert.Equal(t, map[int64]string{3: `"s3"`}, history(t, e))

		// The last pin goes with the claimed head 3.
		complete(t, e, heads[2])
		assert.Empty(t, history(t, e))
		assert.Empty(t, pinCounts(t, e))
		assert.Equal(t, `"s4"`, string(readState(t, e, 0).Snapshot))
	})
}

func pinRef(e *env, index int64) string {
	raw, _ := json.Marshal([]string{keysFor(e, "s").SnapHistory("r"), jsonInt(index)})
	return string(raw)
}

func jsonInt(n int64) string { return strconv.FormatInt(n, 10) }

func TestSnapshotPinsOnLaneHeads(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 3, targeted("c", "x"))
		head := a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 1}
		queued := a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 2}
		other := a2redis.HeadRef{Consumer: "d", Lane: "x", Index: 1}
		beyond := a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 9}
		event := a2redis.HeadRef{Consumer: "c", Index: 1}
		putSnaps(t, e, snap(1, `1`, head), snap(2, `2`, queued, other, beyond, event), snap(3, `3`))
		assert.Equal(t, map[int64]string{1: `1`}, history(t, e), "only the lane's head pins")

		// The snapshot moves with the head: a head that becomes the
		// snapshot head keeps its pin and goes back to the history when
		// the head moves on.
		h := claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		complete(t, e, h)
		assert.Empty(t, history(t, e))
		putSnaps(t, e, snap(3, `"3b"`, queued))
		putSnaps(t, e, snap(4, `4`))
		assert.Equal(t, map[int64]string{3: `"3b"`}, history(t, e))
		h = claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		require.Equal(t, int64(2), h.Index)
		complete(t, e, h)
		assert.Empty(t, history(t, e))
	})
}

func TestSnapshotWritesBelowTheClearAreDropped(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 3, targeted("c", ""))
		putSnaps(t, e, snap(1, `1`, a2redis.HeadRef{Consumer: "c", Index: 1}), snap(2, `2`))
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)

		// The old lifetime's snapshots are ignored.
		assert.Equal(t, redisstore.State{Head: 4, ClearIndex: 4}, readState(t, e, 0))
		assert.Equal(t, redisstore.State{Head: 4, ClearIndex: 4}, readState(t, e, 1))

		// Writes below the marker are dropped, pins on old heads too.
		putSnaps(t, e, snap(3, `3`, a2redis.HeadRef{Consumer: "c", Index: 3}))
		assert.Equal(t, redisstore.State{Head: 4, ClearIndex: 4}, readState(t, e, 0))

		// At or above it they count; the stale head gives way.
		putSnaps(t, e, snap(4, `4`))
		assert.Equal(t, redisstore.State{Snapshot: json.RawMessage(`4`), SnapshotIndex: 4, Head: 4, ClearIndex: 4}, readState(t, e, 0))
		assert.Empty(t, history(t, e), "the old lifetime's history went with the stale head")
	})
}

func TestSnapshotReclaimLeavesNothingOfTheOldLifetime(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, next := range []bool{false, true} {
			session := "s"
			if next {
				session = "t"
			}
			appendN(t, e, session, 3, targeted("c", "x"))
			appendN(t, e, session, 2, func(i int) a2redis.Event {
				return a2redis.Event{ID: session + "-e" + jsonInt(int64(i)), Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
			})
			require.NoError(t, e.store.PutSnapshots(e.ctx, session, "r", []redisstore.SnapshotWrite{
				snap(1, `1`, a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 1}),
				snap(4, `4`, a2redis.HeadRef{Consumer: "c", Index: 4}),
				snap(5, `5`),
			}))
			require.NoError(t, e.store.PutSnapshots(e.ctx, session, "q", []redisstore.SnapshotWrite{snap(2, `2`)}))
			claimed := claim(t, e, redisstore.ClaimRequest{Session: session})
			require.NotEmpty(t, claimed.Heads)
			before := strings.Join(sessionKeys(t, e, session), "\n")
			require.Contains(t, before, ":snap:")
			require.Contains(t, before, ":snap-history:")
			require.Contains(t, before, ":pins")
			_, err := e.store.Clear(e.ctx, session, redisstore.ClearOptions{})
			require.NoError(t, err)
			if next {
				appendN(t, e, session, 1, nil)
			}
			_, err = e.store.Reclaim(e.ctx, session)
			require.NoError(t, err)
			for _, key := range sessionKeys(t, e, session) {
				assert.NotContains(t, key, ":snap:", "session %s", session)
				assert.NotContains(t, key, ":snap-history:", "session %s", session)
				assert.False(t, strings.HasSuffix(key, ":pins"), "session %s keeps %s", session, key)
			}
			st, err := e.store.ReadState(e.ctx, session, "r", redisstore.ReadStateOptions{})
			require.NoError(t, err)
			assert.Nil(t, st.Snapshot)
		}
	})
}

func TestSnapshotRejectsBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1, nil)
		bad := map[string]func() error{
			"empty session": func() error { return e.store.PutSnapshots(e.ctx, "", "r", []redisstore.SnapshotWrite{snap(1, `1`)}) },
			"empty reducer": func() error { return e.store.PutSnapshots(e.ctx, "s", "", []redisstore.SnapshotWrite{snap(1, `1`)}) },
			"bad reducer": func() error {
				return e.store.PutSnapshots(e.ctx, "s", "r\xff", []redisstore.SnapshotWrite{snap(1, `1`)})
			},
			"negative": func() error { return e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(-1, `1`)}) },
			"bad json": func() error {
				return e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(1, `1`), snap(2, `{"a":`)})
			},
			"empty state": func() error { return e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(1, ``)}) },
			"pin consumer": func() error {
				return e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(1, `1`, a2redis.HeadRef{Index: 1})})
			},
			"pin index": func() error {
				return e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(1, `1`, a2redis.HeadRef{Consumer: "c"})})
			},
			"read through": func() error {
				_, err := e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{Through: -1})
				return err
			},
			"read reducer": func() error {
				_, err := e.store.ReadState(e.ctx, "s", "", redisstore.ReadStateOptions{})
				return err
			},
		}
		for name, call := range bad {
			err := call()
			var arg *a2redis.ArgumentError
			assert.ErrorAs(t, err, &arg, name)
			assert.ErrorIs(t, err, a2redis.ErrInvalidArgument, name)
		}
		assert.Equal(t, redisstore.State{Head: 1}, readState(t, e, 0), "nothing was written")
	})
}

func TestSnapshotInvalidStoredHead(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		c := e.client
		require.NoError(t, c.Do(e.ctx, c.B().Set().Key(keysFor(e, "s").Snap("r")).Value(`{"state":1,"index":2}`).Build()).Error())
		_, err := e.store.ReadState(e.ctx, "s", "r", redisstore.ReadStateOptions{})
		require.ErrorIs(t, err, a2redis.ErrUnexpectedReply)
		assert.Contains(t, err.Error(), "head snapshot")
		err = e.store.PutSnapshots(e.ctx, "s", "r", []redisstore.SnapshotWrite{snap(3, `3`)})
		require.ErrorIs(t, err, a2redis.ErrUnexpectedReply)
		raw, err := c.Do(e.ctx, c.B().Get().Key(keysFor(e, "s").Snap("r")).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, `{"state":1,"index":2}`, raw, "nothing was written")
	})
}

func TestReadStateThrough(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 6, targeted("c", ""))
		pin := func(i int64) a2redis.HeadRef { return a2redis.HeadRef{Consumer: "c", Index: i} }
		putSnaps(t, e, snap(1, `1`, pin(1)), snap(3, `3`, pin(3)), snap(5, `5`))
		for through, want := range map[int64]int64{0: 5, 6: 5, 5: 5, 4: 3, 3: 3, 2: 1, 1: 1} {
			st := readState(t, e, through)
			assert.Equal(t, want, st.SnapshotIndex, "through %d", through)
			assert.Equal(t, jsonInt(want), string(st.Snapshot), "through %d", through)
			assert.Equal(t, int64(6), st.Head)
		}
	})
}

// A session with more reducers than one sweep call's budget sweeps their
// checkpoints and pins over several calls, and ends with nothing of the
// old lifetime.
func TestReclaimSweepsManyReducersInPages(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const reducers = 1200
		appendN(t, e, "s", 1, targeted("c", "x"))
		for i := range reducers {
			require.NoError(t, e.store.PutSnapshots(e.ctx, "s", "r"+strconv.Itoa(i), []redisstore.SnapshotWrite{
				snap(1, `1`, a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 1}),
			}))
		}
		k := keysFor(e, "s")
		count := func(cmd rueidis.Completed) int64 {
			n, err := e.client.Do(e.ctx, cmd).AsInt64()
			require.NoError(t, err)
			return n
		}
		registry := k.Base() + "snap-reducers"
		require.Equal(t, int64(reducers), count(e.client.B().Scard().Key(registry).Build()))
		_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		// Script calls until the sweep is done: "1" done, "s" it goes on.
		script := scripts.All()["reclaim"].Lua(false)
		calls := 0
		for {
			reply, err := script.Exec(e.ctx, e.client, []string{k.Count(), k.Sentinel()}, []string{strconv.Itoa(redisstore.ReclaimPageSize)}).ToArray()
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(reply), 2, "{ deleted, done } (and the ready version of a collapse)")
			calls++
			if state, _ := reply[1].ToString(); state == "s" {
				require.Less(t, calls, 100, "the sweep never finished")
				continue
			}
			n, err := reply[1].AsInt64()
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
			break
		}
		// 1200 reducers, then as many drops, in pieces of about 500.
		assert.GreaterOrEqual(t, calls, 4, "the reducers swept in one call")
		assert.Equal(t, int64(0), count(e.client.B().Exists().Key(registry, k.Base()+"pins").Build()), "the registry and the pins went")
		for _, key := range sessionKeys(t, e, "s") {
			assert.NotContains(t, key, ":snap", "left behind")
		}
	})
}
