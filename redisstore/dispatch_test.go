package redisstore_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/redisstore"
)

func claim(t *testing.T, e *env, req redisstore.ClaimRequest) redisstore.ClaimResult {
	t.Helper()
	if req.Session == "" {
		req.Session = "s"
	}
	if req.Holder == "" {
		req.Holder = "w1"
	}
	if req.TTL == 0 && req.ExpiresAt.IsZero() {
		req.TTL = time.Minute
	}
	r, err := e.store.ClaimAvailable(e.ctx, req)
	require.NoError(t, err)
	return r
}

func complete(t *testing.T, e *env, h a2redis.HeadEvent, events ...a2redis.Event) redisstore.CompleteResult {
	t.Helper()
	r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: h.Session, Head: h.Ref(), Attempt: h.Attempts, Events: events})
	require.NoError(t, err)
	return r
}

func refs(heads []a2redis.HeadEvent) []string {
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = fmt.Sprintf("%s/%s@%d", h.Consumer, h.Lane, h.Index)
	}
	return out
}

func TestEventCursorClaimComplete(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res, err := e.store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "order", Payload: json.RawMessage(`{"id":1}`), Targets: []a2redis.Target{{Consumer: "mail"}, {Consumer: "bill"}}},
			{Type: "order", Targets: []a2redis.Target{{Consumer: "mail"}}},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, res.HasPending)

		c := claim(t, e, redisstore.ClaimRequest{})
		require.Equal(t, redisstore.Claimed, c.Outcome)
		assert.Equal(t, []string{"bill/@1", "mail/@1", "mail/@2"}, refs(c.Heads))
		h := c.Heads[1]
		assert.Equal(t, int64(1), h.Attempts)
		assert.Equal(t, "w1", h.Holder)
		assert.Equal(t, a2redis.EventCursor, h.Kind)
		assert.JSONEq(t, `{"id":1}`, string(h.Payload))
		assert.Equal(t, int64(2), c.SessionHead)

		// Everything is held now.
		busy := claim(t, e, redisstore.ClaimRequest{Holder: "w2"})
		assert.Equal(t, redisstore.Busy, busy.Outcome)
		assert.Equal(t, e.clock.Now().Add(time.Minute).UnixMilli(), busy.RetryAt.UnixMilli())

		// Completing appends the returned events with the attempt as cause.
		done := complete(t, e, h, a2redis.Event{ID: "sent-1", Type: "mail.sent"})
		require.Equal(t, redisstore.Completed, done.Outcome)
		require.Len(t, done.Events, 1)
		assert.Equal(t, int64(3), done.Events[0].Index)
		assert.Equal(t, &a2redis.Cause{Consumer: "mail", Index: 1, Attempt: 1}, done.Events[0].Cause)
		stored, err := e.store.Read(e.ctx, "s", 2, 0)
		require.NoError(t, err)
		assert.Equal(t, done.Events[0].Cause, stored[0].Cause)

		// A retry after a lost acknowledgement replays; other ids are a
		// partial duplicate; a stale attempt is superseded.
		again := complete(t, e, h, a2redis.Event{ID: "sent-1", Type: "mail.sent"})
		assert.True(t, again.Replayed)
		assert.Equal(t, int64(3), again.Events[0].Index)
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: 1, Events: []a2redis.Event{{ID: "other", Type: "x"}}})
		require.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)
		stale, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: 7})
		require.NoError(t, err)
		assert.Equal(t, redisstore.CompleteSuperseded, stale.Outcome)
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: a2redis.HeadRef{Consumer: "mail", Index: 99}, Attempt: 1})
		require.ErrorIs(t, err, a2redis.ErrNoEvent)

		complete(t, e, c.Heads[0])
		complete(t, e, c.Heads[2])
		assert.Equal(t, redisstore.Settled, claim(t, e, redisstore.ClaimRequest{}).Outcome)
		res, err = e.store.Append(e.ctx, "s", nil, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, res.HasPending)
	})
}

func TestLaneOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 5, func(i int) a2redis.Event {
			lane := "a"
			if i%2 == 1 {
				lane = "b"
			}
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: lane}}}
		})
		var order []int64
		for range 10 {
			c := claim(t, e, redisstore.ClaimRequest{})
			if c.Outcome == redisstore.Settled {
				break
			}
			require.Equal(t, redisstore.Claimed, c.Outcome)
			require.Len(t, c.Heads, 2-len(order)/4, "one head per lane")
			for _, h := range c.Heads {
				assert.Equal(t, a2redis.LaneCursor, h.Kind)
				order = append(order, h.Index)
				complete(t, e, h)
			}
		}
		assert.Equal(t, []int64{1, 2, 3, 4, 5}, order)
	})
}

func TestTypedLogCursor(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		log := []a2redis.Consumer{{Name: "audit", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"rare"}}}}
		// History before the consumer exists.
		appendN(t, e, "s", 1000, func(i int) a2redis.Event {
			if i == 500 {
				return a2redis.Event{Type: "rare"}
			}
			return a2redis.Event{Type: "common"}
		})
		// A backfilling cursor starts at the beginning of the lifetime and
		// finds the one event through a type index built page by page.
		backfill := a2redis.Consumer{Name: "late", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"rare"}, Backfill: true}}
		w, err := e.store.WakeLog(e.ctx, "s", backfill)
		require.NoError(t, err)
		assert.Equal(t, int64(501), w.Cursor.Head)
		assert.Equal(t, int64(1000), w.SessionHead)

		// A non-backfilling cursor starts with the append that carries its type.
		for round := range 3 {
			res, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "common"}, {Type: "rare", ID: "r" + strconv.Itoa(round)}}, redisstore.AppendOptions{Consumers: log})
			require.NoError(t, err)
			assert.True(t, res.HasPending)
		}
		var got []int64
		for {
			c := claim(t, e, redisstore.ClaimRequest{Consumers: log})
			if c.Outcome != redisstore.Claimed {
				break
			}
			require.Len(t, c.Heads, 1)
			assert.Equal(t, "rare", c.Heads[0].Type)
			assert.Equal(t, a2redis.LogCursor, c.Heads[0].Kind)
			got = append(got, c.Heads[0].Index)
			complete(t, e, c.Heads[0])
		}
		assert.Equal(t, []int64{1002, 1004, 1006}, got)

		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, cursors, 2)
		assert.Equal(t, a2redis.Cursor{Consumer: "audit", Lane: "log", Kind: a2redis.LogCursor, Position: 1006}, cursors[0])
		assert.Equal(t, int64(501), cursors[1].Head)
	})
}

func TestLapsedClaimIsFenced(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}}
		})
		first := claim(t, e, redisstore.ClaimRequest{Holder: "w1", TTL: time.Second}).Heads[0]
		e.clock.Advance(2 * time.Second)
		second := claim(t, e, redisstore.ClaimRequest{Holder: "w2", TTL: time.Minute})
		require.Len(t, second.Heads, 1)
		taken := second.Heads[0]
		assert.Equal(t, int64(2), taken.Attempts)
		assert.Equal(t, int64(1), taken.Failures, "a lapsed takeover counts a failure")

		// The first holder is fenced everywhere.
		r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: first.Ref(), Attempt: first.Attempts, Events: []a2redis.Event{{Type: "x"}}})
		require.NoError(t, err)
		assert.Equal(t, redisstore.CompleteSuperseded, r.Outcome)
		f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: first.Ref(), Attempt: first.Attempts, MaxFailures: 3})
		require.NoError(t, err)
		assert.Equal(t, redisstore.FailSuperseded, f.Outcome)
		cause := first.Cause()
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Cause: &cause}}, redisstore.AppendOptions{})
		require.ErrorIs(t, err, a2redis.ErrSupersededAttempt)
		var sup *a2redis.SupersededError
		require.ErrorAs(t, err, &sup)
		assert.Equal(t, cause, sup.Cause)
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{Cause: &cause})
		require.ErrorIs(t, err, a2redis.ErrSupersededAttempt)
		rn, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: []redisstore.Attempt{{Head: first.Ref(), Attempt: 1}}})
		require.NoError(t, err)
		assert.Equal(t, []a2redis.HeadRef{first.Ref()}, rn.Superseded)
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, int64(1), b.Head, "nothing was appended")

		// The current attempt may append caused events and complete.
		cause2 := taken.Cause()
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Cause: &cause2}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Equal(t, redisstore.Completed, complete(t, e, taken).Outcome)
	})
}

func TestFailuresDeadLettersAndRedrive(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 2, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}}
		})
		h := claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		fail := redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 2, RetryAfter: 10 * time.Second}
		f, err := e.store.FailAttempt(e.ctx, fail)
		require.NoError(t, err)
		assert.Equal(t, redisstore.FailResult{Outcome: redisstore.Failed, Failures: 1}, f)
		again, err := e.store.FailAttempt(e.ctx, fail)
		require.NoError(t, err)
		assert.Equal(t, f, again, "repeating a failure report is idempotent")

		// Held until the retry time.
		busy := claim(t, e, redisstore.ClaimRequest{})
		assert.Equal(t, redisstore.Busy, busy.Outcome)
		assert.Equal(t, e.clock.Now().Add(10*time.Second).UnixMilli(), busy.RetryAt.UnixMilli())
		e.clock.Advance(11 * time.Second)
		h = claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		assert.Equal(t, int64(2), h.Attempts)
		assert.Equal(t, int64(1), h.Failures, "a retry hold is not a lapsed claim")
		assert.Equal(t, "boom", h.LastError)
		fail.Attempt = h.Attempts
		f, err = e.store.FailAttempt(e.ctx, fail)
		require.NoError(t, err)
		assert.Equal(t, redisstore.FailResult{Outcome: redisstore.DeadLettered, Failures: 2}, f)

		// A dead-lettered lane head blocks its lane.
		assert.Equal(t, redisstore.Settled, claim(t, e, redisstore.ClaimRequest{}).Outcome)
		res, err := e.store.Append(e.ctx, "s", nil, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.False(t, res.HasPending)
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, int64(1), dead[0].Index)
		assert.True(t, dead[0].DeadLettered())
		assert.Equal(t, "boom", dead[0].LastError)

		// Retry: runnable again with fresh failures.
		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Retry})
		require.NoError(t, err)
		assert.Equal(t, redisstore.RedriveResult{Redriven: true, HasPending: true}, rd)
		h = claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		assert.Equal(t, int64(1), h.Index)
		assert.Equal(t, int64(0), h.Failures)
		f, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, MaxFailures: 1})
		require.NoError(t, err)
		assert.Equal(t, redisstore.DeadLettered, f.Outcome)

		// Skip: the lane moves on to its next event.
		rd, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Skip})
		require.NoError(t, err)
		assert.True(t, rd.Redriven)
		h = claim(t, e, redisstore.ClaimRequest{}).Heads[0]
		assert.Equal(t, int64(2), h.Index)
		rd, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Skip})
		require.NoError(t, err)
		assert.False(t, rd.Redriven, "nothing dead-lettered there any more")
	})
}

func TestLapsedTakeoverDeadLetters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
		})
		claim(t, e, redisstore.ClaimRequest{TTL: time.Second})
		e.clock.Advance(time.Hour)
		c := claim(t, e, redisstore.ClaimRequest{MaxFailures: 1})
		assert.Equal(t, redisstore.Claimed, c.Outcome)
		assert.Empty(t, c.Heads)
		require.Len(t, c.DeadLettered, 1)
		assert.Equal(t, int64(2), c.DeadLettered[0].Attempts)
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		assert.Len(t, dead, 1)
	})
}

func TestClaimFilters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 6, func(i int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: []string{"a", "b"}[i%2]}}}
		})
		c := claim(t, e, redisstore.ClaimRequest{Through: 3, Exclude: []a2redis.HeadRef{{Consumer: "a", Index: 1}}})
		assert.Equal(t, []string{"b/@2", "a/@3"}, refs(c.Heads))
		c = claim(t, e, redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "b"}}, Limit: 1})
		assert.Equal(t, []string{"b/@4"}, refs(c.Heads))
		c = claim(t, e, redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "b"}}})
		assert.Equal(t, []string{"b/@6"}, refs(c.Heads))
		assert.Equal(t, redisstore.Busy, claim(t, e, redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "b"}}}).Outcome)
		res, err := e.store.Append(e.ctx, "s", nil, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{Name: "zzz"}}})
		require.NoError(t, err)
		assert.False(t, res.HasPending, "an unserved consumer's heads do not count")
		res, err = e.store.Append(e.ctx, "s", nil, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{Name: "a"}}})
		require.NoError(t, err)
		assert.True(t, res.HasPending)
	})
}

func TestRenewClaims(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 2, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}}
		})
		h := claim(t, e, redisstore.ClaimRequest{TTL: time.Second}).Heads[0]
		req := redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: []redisstore.Attempt{
			redisstore.AttemptOf(h),
			{Head: a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 2}, Attempt: 1}, // not reached yet
		}}
		r, err := e.store.RenewClaims(e.ctx, req)
		require.NoError(t, err)
		assert.Equal(t, []a2redis.HeadRef{h.Ref()}, r.Renewed)
		assert.Empty(t, r.Superseded)
		e.clock.Advance(30 * time.Second)
		assert.Equal(t, redisstore.Busy, claim(t, e, redisstore.ClaimRequest{Holder: "w2"}).Outcome, "the renewed claim still holds")
	})
}

func TestDispatchRejectsBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1, func(int) a2redis.Event { return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}} })
		ref := a2redis.HeadRef{Consumer: "c", Index: 1}
		errs := []error{
			func() error {
				_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", TTL: time.Second})
				return err
			}(),
			func() error {
				_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h"})
				return err
			}(),
			func() error {
				_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: -time.Second})
				return err
			}(),
			func() error {
				_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Second, MaxFailures: -1})
				return err
			}(),
			func() error {
				_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: ref, Attempt: 0})
				return err
			}(),
			func() error {
				_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: a2redis.HeadRef{Index: 1}, Attempt: 1})
				return err
			}(),
			func() error {
				_, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: ref, Attempt: 1, MaxFailures: -1})
				return err
			}(),
			func() error {
				_, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Index: 1, Action: "later"})
				return err
			}(),
			func() error {
				_, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "h", TTL: 0})
				return err
			}(),
			func() error { _, err := e.store.WakeLog(e.ctx, "s", a2redis.Consumer{Name: "c"}); return err }(),
		}
		for i, err := range errs {
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "case %d", i)
		}
		// Nothing was claimed by any of them.
		c := claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, c.Heads, 1)
		assert.Equal(t, int64(1), c.Heads[0].Attempts)
	})
}

func TestClearSupersedesHeads(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		logc := []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{Lane: "all"}}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "l", Lane: "x"}}}}, redisstore.AppendOptions{Consumers: logc})
		require.NoError(t, err)
		c := claim(t, e, redisstore.ClaimRequest{})
		require.Len(t, c.Heads, 3)
		_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
		require.NoError(t, err)
		for _, h := range c.Heads {
			r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts})
			require.NoError(t, err)
			assert.Equal(t, redisstore.CompleteSuperseded, r.Outcome)
		}
		assert.Equal(t, redisstore.Settled, claim(t, e, redisstore.ClaimRequest{}).Outcome)
		// New appends start the cursors afresh from the marker.
		_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "l", Lane: "x"}}}}, redisstore.AppendOptions{Consumers: logc})
		require.NoError(t, err)
		c = claim(t, e, redisstore.ClaimRequest{})
		assert.Equal(t, []string{"g/all@3", "l/x@3"}, refs(c.Heads))
		cursors, err := e.store.Cursors(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, cursors, 2)
		assert.Equal(t, int64(2), cursors[0].Position)
		assert.Equal(t, int64(2), cursors[1].Position)
	})
}

func TestRedriveNamesTheCursor(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		appendN(t, e, "s", 1, func(int) a2redis.Event {
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}, {Consumer: "c", Lane: "x"}}}
		})
		for _, h := range claim(t, e, redisstore.ClaimRequest{}).Heads {
			f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, MaxFailures: 1})
			require.NoError(t, err)
			require.Equal(t, redisstore.DeadLettered, f.Outcome)
		}
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dead, 2)
		r, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Skip})
		require.NoError(t, err)
		assert.True(t, r.Redriven)
		dead, err = e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, a2redis.EventCursor, dead[0].Kind, "the lane head was skipped, the event cursor's stays")
		r, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Index: 1, Action: redisstore.Retry})
		require.NoError(t, err)
		assert.True(t, r.Redriven)
		c := claim(t, e, redisstore.ClaimRequest{})
		assert.Equal(t, []string{"c/@1"}, refs(c.Heads))
	})
}

// A completion whose returned event ids are not UTF-8 replays on a retry
// (the ids are recorded byte-exact, not as JSON, which would coerce them).
func TestCompleteReplaysIDsThatAreNotUTF8(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute})
		require.NoError(t, err)
		h := c.Heads[0]
		req := redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Events: []a2redis.Event{{ID: "bad\xff\xfeid", Type: "child"}}}
		first, err := e.store.CompleteAttempt(e.ctx, req)
		require.NoError(t, err)
		require.False(t, first.Replayed)
		again, err := e.store.CompleteAttempt(e.ctx, req)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, "bad\xff\xfeid", again.Events[0].ID)
		// Other ids for the same attempt are a partial duplicate.
		other := req
		other.Events = []a2redis.Event{{ID: "bad\xff\xfdid", Type: "child"}}
		_, err = e.store.CompleteAttempt(e.ctx, other)
		require.ErrorIs(t, err, a2redis.ErrPartialDuplicateBatch)
	})
}

// A head chunk of a session of rows.ChunkPinFrom events or more stays in
// hashtable encoding from its first write: in a listpack every row read or
// write would scan the whole chunk. (A smaller session's chunk is a small
// listpack: TestCompactionKeepsTheSession.)
func TestHeadChunksUseHashtableEncoding(t *testing.T) {
	for _, tg := range redistest.Targets {
		if tg.Name == "miniredis" {
			continue // no encodings
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tg)
			batch := make([]a2redis.Event, rows.ChunkPinFrom)
			for i := range batch {
				batch[i] = a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}
			}
			_, err := e.store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
			require.NoError(t, err)
			c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute, Limit: 1})
			require.NoError(t, err)
			require.Len(t, c.Heads, 1)
			key := keysFor(e, "s").Heads(0)
			enc, err := e.client.Do(e.ctx, e.client.B().ObjectEncoding().Key(key).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, "hashtable", enc)
			pin, err := e.client.Do(e.ctx, e.client.B().Hget().Key(key).Field(rows.ChunkPin).Build()).ToString()
			require.NoError(t, err)
			assert.Equal(t, rows.ChunkPinValue, pin)
		})
	}
}

// TestTakeoverRunsAlone: a claim that takes over lapsed heads takes one at
// a time; heads lost together count no failure (the crash may have been any
// one's), a head lost alone counts one, and each takeover says why in the
// head's last error.
func TestTakeoverRunsAlone(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		consumers := []a2redis.Consumer{{Name: "aud", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"flagged"}}}}
		targets := []a2redis.Target{{Consumer: "mod", Lane: "conv"}, {Consumer: "idx"}}
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "flagged", ID: "m1", Targets: targets}}, redisstore.AppendOptions{Consumers: consumers})
		require.NoError(t, err)
		batch := claim(t, e, redisstore.ClaimRequest{Holder: "w1", TTL: time.Second})
		require.Len(t, batch.Heads, 3, "a fresh claim takes the session's heads together")
		until := e.clock.Now().Add(time.Second)

		e.clock.Advance(2 * time.Second)
		ts := func(at time.Time) string { return at.UTC().Format("2006-01-02T15:04:05.000Z") }
		why := " (no failure counted: it lapsed with 2 other heads of the session, so the crash may have been another's)"
		c := claim(t, e, redisstore.ClaimRequest{Holder: "w2", TTL: time.Minute, MaxFailures: 1})
		require.Equal(t, redisstore.Claimed, c.Outcome)
		require.Len(t, c.Heads, 1, "a takeover runs alone")
		require.Empty(t, c.DeadLettered, "a head lost with others is not dead-lettered for their crash")
		lone := c.Heads[0]
		assert.Equal(t, int64(2), lone.Attempts)
		assert.Equal(t, int64(0), lone.Failures)
		assert.Equal(t, "lease expired: held by w1 until "+ts(until)+", taken over by w2 at "+ts(e.clock.Now())+why, lone.LastError)

		// The other two were released: free, uncounted, saying why.
		rest := claim(t, e, redisstore.ClaimRequest{Holder: "w3", TTL: time.Minute, MaxFailures: 1})
		require.Len(t, rest.Heads, 2)
		for _, h := range rest.Heads {
			assert.Equal(t, int64(2), h.Attempts)
			assert.Equal(t, int64(0), h.Failures)
			assert.Equal(t, "lease expired: held by w1 until "+ts(until)+", released by w2 at "+ts(e.clock.Now())+why, h.LastError)
			complete(t, e, h)
		}

		// w2 loses the head it took over alone: that counts.
		e.clock.Advance(2 * time.Minute)
		c = claim(t, e, redisstore.ClaimRequest{Holder: "w4", TTL: time.Minute, MaxFailures: 1})
		require.Len(t, c.DeadLettered, 1, "a head lost alone counts the failure")
		d := c.DeadLettered[0]
		assert.Equal(t, lone.Ref(), d.Ref())
		assert.Equal(t, int64(1), d.Failures)
		assert.Equal(t, lone.Attempts, d.LastFailedAttempt)
		assert.Equal(t, "lease expired: held by w2 until "+ts(lone.ClaimExpiresAt)+", taken over by w4 at "+ts(e.clock.Now()), d.LastError)
		dead, err := e.store.DeadLetters(e.ctx, "s")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, d.LastError, dead[0].LastError)
		assert.Equal(t, e.clock.Now().UnixMilli(), dead[0].LastFailedAt.UnixMilli())
	})
}
