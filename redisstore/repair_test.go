package redisstore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// A session wedged the way an older release's append_targeted left it when
// its ZADD failed after its XADD (built here by hand: the log entry above
// the counter, nothing else) refuses every append and reads stop at the
// counter; RepairSession removes the entry, the batch sent again with its
// id is written (heads and all), and the events before it are untouched.
// A second repair, and a repair of a healthy session, change nothing.
func TestRepairSessionUnwedges(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		targets := []a2redis.Target{{Consumer: "c"}}
		events := []a2redis.Event{{Type: "a", Payload: []byte(`{"n":1}`)}, {Type: "b", Targets: targets}, {Type: "a", Payload: []byte(`[2]`), Targets: targets}}
		_, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)
		before, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, before, 3)

		// The wedge: an entry at 4 that the counter (3) never recorded.
		log := keysFor(e, "s").Log()
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Xadd().Key(log).Id("4-0").FieldValue().
			FieldValue("id", "lost-id").FieldValue("type", "t").FieldValue("payload", "null").FieldValue("created_at", "1").Build()).Error())
		lost := []a2redis.Event{{ID: "lost-id", Type: "t", Targets: targets}}
		_, err = e.store.Append(e.ctx, "s", lost, redisstore.AppendOptions{})
		require.Error(t, err, "the session is wedged")
		assert.True(t, strings.Contains(err.Error(), "equal or smaller"), "%v", err)
		assert.ErrorIs(t, err, a2redis.ErrRejected, "a resend cannot succeed")
		wedged, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, wedged, 3)

		r, err := e.store.RepairSession(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, int64(3), r.Head)
		assert.Equal(t, []int64{4}, r.Removed)
		assert.Equal(t, 3, r.Copied)

		res, err := e.store.Append(e.ctx, "s", lost, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 1)
		assert.False(t, res.Replayed)
		assert.Equal(t, int64(4), res.Events[0].Index)
		after, err := e.store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, after, 4)
		assert.Equal(t, before, after[:3], "the events before the wedge are untouched")
		assert.Equal(t, "lost-id", after[3].ID)
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err, "later appends work")

		// Every head runs: the two before the wedge and the resent one's.
		c := claim(t, e, redisstore.ClaimRequest{Session: "s"})
		require.Len(t, c.Heads, 3)
		assert.Equal(t, int64(4), c.Heads[2].Index)
		completeAll(t, e, "s", c.Heads)

		again, err := e.store.RepairSession(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, redisstore.SessionRepair{Head: 5}, again, "nothing to repair")
		healthy, err := e.store.RepairSession(e.ctx, "never-written")
		require.NoError(t, err)
		assert.Equal(t, redisstore.SessionRepair{}, healthy)
	})
}

// A wedged session whose log holds nothing at or below its head (reclaimed)
// and a wedged new session (head 0) are repaired too.
func TestRepairSessionWithNothingBelow(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, session := range []string{"new", "reclaimed"} {
			log := keysFor(e, session).Log()
			if session == "reclaimed" {
				require.NoError(t, e.client.Do(e.ctx, e.client.B().Set().Key(keysFor(e, session).Count()).Value("7").Build()).Error())
			}
			first := "1-0"
			if session == "reclaimed" {
				first = "8-0"
			}
			require.NoError(t, e.client.Do(e.ctx, e.client.B().Xadd().Key(log).Id(first).FieldValue().
				FieldValue("id", "x").FieldValue("type", "t").FieldValue("payload", "null").FieldValue("created_at", "1").Build()).Error())
			r, err := e.store.RepairSession(e.ctx, session)
			require.NoError(t, err, session)
			require.Len(t, r.Removed, 1, session)
			res, err := e.store.Append(e.ctx, session, []a2redis.Event{{ID: "x", Type: "t"}}, redisstore.AppendOptions{})
			require.NoError(t, err, session)
			assert.Equal(t, r.Head+1, res.Events[0].Index, session)
		}
	})
}
