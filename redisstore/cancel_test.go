package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// Cancel skips a head without running it: a free event head, a scheduled
// one, a claimed one (whose running attempt is then superseded: its
// completion appends nothing) and a lane's head (its next head becomes
// claimable); a dead letter is left to Redrive; the session's live count and
// ready listing follow.
func TestCancel(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lane := []a2redis.Target{{Consumer: "c", Lane: "x"}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},                                          // 1: free
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}, NotBefore: e.clock.Now().Add(time.Hour)}, // 2: scheduled
			{Type: "t", Targets: lane}, // 3: the lane's head
			{Type: "t", Targets: lane}, // 4: behind it
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		cancel := func(lane string, idx int64) redisstore.CancelResult {
			t.Helper()
			r, err := e.store.Cancel(e.ctx, redisstore.CancelRequest{Session: "s", Consumer: "c", Lane: lane, Index: idx})
			require.NoError(t, err)
			return r
		}
		require.Equal(t, redisstore.Cancelled, cancel("", 1).Outcome)
		require.Equal(t, redisstore.CancelNotFound, cancel("", 1).Outcome, "cancelled once")
		require.Equal(t, redisstore.Cancelled, cancel("", 2).Outcome, "a scheduled head")
		require.Equal(t, redisstore.CancelNotFound, cancel("x", 4).Outcome, "4 is not the lane's head yet")

		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		require.Equal(t, int64(3), c.Heads[0].Index, "the cancelled heads do not run")
		r := cancel("x", 3)
		require.Equal(t, redisstore.Cancelled, r.Outcome, "a claimed head")
		require.Equal(t, int64(1), r.Attempts)
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1,
			Events: []a2redis.Event{{Type: "returned"}}})
		require.NoError(t, err)
		require.Equal(t, redisstore.CompleteSuperseded, done.Outcome, "the running attempt's completion is fenced")
		f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1, Error: "x", MaxFailures: 3})
		require.NoError(t, err)
		require.Equal(t, redisstore.FailSuperseded, f.Outcome)
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		require.Equal(t, int64(4), b.Head, "nothing was appended")

		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		require.Equal(t, int64(4), c.Heads[0].Index, "the lane moved on")
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1, Error: "x", MaxFailures: 1})
		require.NoError(t, err)
		require.Equal(t, redisstore.CancelDeadLettered, cancel("x", 4).Outcome)
		dl, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dl, 1, "cancelled heads are not dead letters; the dead letter stays")
		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 4, Action: redisstore.Skip})
		require.NoError(t, err)
		require.True(t, rd.Redriven)
		e.requireUnlisted("s", "no head left")
		record := func(lane string, idx int64) redisstore.HeadRecord {
			t.Helper()
			r, err := e.store.HeadRecord(e.ctx, "s", a2redis.HeadRef{Consumer: "c", Lane: lane, Index: idx})
			require.NoError(t, err)
			return r
		}
		now := time.UnixMilli(e.clock.Now().UnixMilli())
		for _, ref := range []struct {
			lane string
			idx  int64
		}{{"", 1}, {"", 2}, {"x", 3}} {
			r := record(ref.lane, ref.idx)
			require.Equal(t, redisstore.HeadRecord{Done: true, DoneAt: now, CancelledAt: now}, r, "head %d is recorded cancelled", ref.idx)
			require.True(t, r.Cancelled())
		}
		require.Equal(t, redisstore.HeadRecord{Done: true, DoneAt: now}, record("x", 4), "a redrive skip is no cancel")
		require.Equal(t, redisstore.HeadRecord{}, record("", 4), "no such head")
		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		for _, cur := range cursors {
			require.Zero(t, cur.Head, "%+v", cur)
		}

		_, err = e.store.Cancel(e.ctx, redisstore.CancelRequest{Session: "s", Consumer: "c", Index: 0})
		require.True(t, errors.Is(err, a2redis.ErrInvalidArgument), "%v", err)
	})
}
