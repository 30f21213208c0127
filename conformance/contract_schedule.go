package conformance

import (
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// Scheduled events (Event.NotBefore) and Cancel.
func init() {
	contract("Schedule/HeadsWaitForTheirTime", func(t *testing.T, e *env) {
		at := e.clock.Now().Add(time.Minute)
		later := func(ev a2redis.Event) a2redis.Event { ev.NotBefore = at; return ev }
		events := []a2redis.Event{later(ev("remind", to("mail"))), ev("now", to("mail")), later(ev("remind", lane("ship", "a"))), ev("next", lane("ship", "a"))}
		r := e.append("s", events...)
		e.eq(r.Events[0].NotBefore.UnixMilli(), at.UnixMilli(), "the append reports the time")
		e.check(r.Events[1].NotBefore.IsZero(), "an unscheduled event has none")
		c := e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"mail@2"}, "the scheduled heads wait; the lane waits behind its scheduled head")
		e.complete(c.Heads[0])
		busy := e.claim(redisstore.ClaimRequest{})
		e.eq(busy.Outcome, redisstore.Busy, "busy until the time")
		e.eq(busy.RetryAt.UnixMilli(), at.UnixMilli(), "retry at the time")
		e.clock.Advance(time.Minute)
		c = e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"mail@1", "ship/a@3"}, "due")
		for _, h := range c.Heads {
			e.eq([]int64{h.Attempts, h.Failures}, []int64{1, 0}, "a scheduled hold counts no failure (%s)", refOf(h.Ref()))
			e.eq(h.NotBefore.UnixMilli(), at.UnixMilli(), "the claimed event carries its time")
		}
		for i := range events {
			events[i].ID = r.Events[i].ID
		}
		replay := e.append("s", events...)
		e.check(replay.Replayed, "idempotent")
		e.eq(replay.Events[2].NotBefore.UnixMilli(), at.UnixMilli(), "the replay carries the time")
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", NotBefore: at}}, redisstore.AppendOptions{})
		e.is(err, a2redis.ErrInvalidArgument, "NotBefore without targets")
	})

	contract("Cancel/SkipsWithoutRunningAndFences", func(t *testing.T, e *env) {
		e.append("s", ev("a", lane("ship", "a")), ev("b", lane("ship", "a")), ev("c", to("mail")))
		c := e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"ship/a@1", "mail@3"}, "claimed")
		cancel := func(consumer, lane string, idx int64) redisstore.CancelResult {
			r, err := e.store.Cancel(e.ctx, redisstore.CancelRequest{Session: "s", Consumer: consumer, Lane: lane, Index: idx})
			e.no(err, "cancel %s/%s@%d", consumer, lane, idx)
			return r
		}
		e.eq(cancel("ship", "a", 1), redisstore.CancelResult{Outcome: redisstore.Cancelled, Attempts: 1, HasPending: true}, "a running head")
		done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: 1, Events: []a2redis.Event{{Type: "out"}}})
		e.no(err, "complete")
		e.eq(done.Outcome, redisstore.CompleteSuperseded, "the cancelled attempt's completion is refused")
		e.eq(e.bounds("s").Head, int64(3), "its events are not appended")
		e.eq(cancel("ship", "a", 1).Outcome, redisstore.CancelNotFound, "cancelled once")
		e.eq(cancel("ship", "a", 2), redisstore.CancelResult{Outcome: redisstore.Cancelled, HasPending: true}, "the lane's next head, never run")
		e.eq(cursorLines(e.cursors("s")), []string{
			"event mail/ pos=2 head=3 att=1 fail=0 dead=false",
			"lane ship/a pos=2 head=0 att=0 fail=0 dead=false",
		}, "the lane moved past both")
		dl, err := e.store.DeadLetters(e.ctx, "s")
		e.no(err, "dead letters")
		e.eq(len(dl), 0, "a cancel is no dead letter")
	})
}
