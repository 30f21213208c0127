package conformance

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// §1 cursors: an event cursor per (consumer, event); a lane cursor per
// (consumer, lane) whose head alone runs; a log cursor reading the whole log
// by type.
func init() {
	contract("Cursors/EventCursorsRunConcurrently", func(t *testing.T, e *env) {
		e.append("s", ev("order", to("mail"), to("bill")), ev("order", to("mail")), ev("noise"))
		c := e.claim(redisstore.ClaimRequest{})
		e.eq(c.Outcome, redisstore.Claimed, "outcome")
		e.eq(headRefs(c.Heads), []string{"bill@1", "mail@1", "mail@2"}, "every targeted event is a head of its own")
		for _, h := range c.Heads {
			e.eq([]any{h.Kind, h.Attempts, h.Holder, h.Type}, []any{a2redis.EventCursor, 1, "w1", "order"}, "head %s", refOf(h.Ref()))
		}
		e.eq([]int64{c.ClearIndex, c.SessionHead}, []int64{0, 3}, "claim reports the bounds")
		e.eq(cursorLines(e.cursors("s")), []string{
			"event bill/ pos=0 head=1 att=1 fail=0 dead=false",
			"event mail/ pos=0 head=1 att=1 fail=0 dead=false",
			"event mail/ pos=1 head=2 att=1 fail=0 dead=false",
		}, "event cursors with a head are listed, position = head - 1")
		e.complete(c.Heads[1])
		e.eq(cursorLines(e.cursors("s")), []string{
			"event bill/ pos=0 head=1 att=1 fail=0 dead=false",
			"event mail/ pos=1 head=2 att=1 fail=0 dead=false",
		}, "a completed event cursor is gone")
	})

	contract("Cursors/CompleteAttemptsInOneCall", func(t *testing.T, e *env) {
		paid := logc("bill", "money", false, "paid")
		served := []a2redis.Consumer{paid, {Name: "mail"}, {Name: "ship"}}
		e.appendServed("s", served, ev("paid", to("mail"), lane("ship", "a")), ev("paid", lane("ship", "a")), ev("noise", to("mail")))
		c := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(c.Heads), []string{"bill/money@1", "mail@1", "ship/a@1", "mail@3"}, "claimed")
		many := func(attempts ...redisstore.Attempt) ([]redisstore.CompleteResult, error) {
			return e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: attempts, Consumers: served})
		}
		all := make([]redisstore.Attempt, len(c.Heads))
		for i, h := range c.Heads {
			all[i] = redisstore.AttemptOf(h)
		}
		before := e.cursors("s")

		// Whatever fails the call fails it before anything is written.
		_, err := many(append(all, redisstore.Attempt{Head: a2redis.HeadRef{Consumer: "mail", Index: 9}, Attempt: 1})...)
		e.is(err, a2redis.ErrNoEvent, "a head past the log")
		_, err = many(all[0], all[0])
		e.is(err, a2redis.ErrInvalidArgument, "a head named twice")
		_, err = many(redisstore.Attempt{Head: all[1].Head, Attempt: 0})
		e.is(err, a2redis.ErrInvalidArgument, "attempt 0")
		_, err = many(redisstore.Attempt{Head: a2redis.HeadRef{Index: 1}, Attempt: 1})
		e.is(err, a2redis.ErrInvalidArgument, "no consumer")
		e.eq(cursorLines(e.cursors("s")), cursorLines(before), "refused calls wrote nothing")

		stale := redisstore.Attempt{Head: all[3].Head, Attempt: 2}
		res, err := many(all[0], all[1], all[2], stale)
		e.no(err, "complete three and a stale attempt")
		outcomes := make([]string, len(res))
		for i, r := range res {
			outcomes[i] = fmt.Sprintf("%s replayed=%v", r.Outcome, r.Replayed)
		}
		e.eq(outcomes, []string{"completed replayed=false", "completed replayed=false", "completed replayed=false", "superseded replayed=false"}, "outcomes in request order")
		e.eq(cursorLines(e.cursors("s")), []string{
			"log bill/money pos=1 head=2 att=0 fail=0 dead=false",
			"event mail/ pos=2 head=3 att=1 fail=0 dead=false",
			"lane ship/a pos=1 head=2 att=0 fail=0 dead=false",
		}, "the log cursor took its next type, the lane its next event, the event cursor is gone")

		res, err = many(all[1], all[3])
		e.no(err, "a retry with the pending head")
		e.eq([]any{res[0].Outcome, res[0].Replayed, res[1].Outcome, res[1].Replayed}, []any{redisstore.Completed, true, redisstore.Completed, false}, "the retry replays, the other completes")
		next := e.claim(redisstore.ClaimRequest{Consumers: served})
		e.eq(headRefs(next.Heads), []string{"bill/money@2", "ship/a@2"}, "the moved cursors' heads are claimable")

		// A completion that returned events replays only through CompleteAttempt.
		h := next.Heads[1]
		e.complete(h, a2redis.Event{ID: "child", Type: "shipped"})
		_, err = many(redisstore.AttemptOf(h))
		e.is(err, a2redis.ErrPartialDuplicateBatch, "a completion with returned events")
		res, err = many()
		e.no(err, "nothing to complete")
		e.eq(len(res), 0, "no results")
	})

	contract("Cursors/LaneIsStrictFIFO", func(t *testing.T, e *env) {
		for i := range 6 {
			e.append("s", ev("t", lane("c", []string{"a", "b"}[i%2]), lane("d", "a")))
		}
		var order []string
		for round := 0; ; round++ {
			c := e.claim(redisstore.ClaimRequest{})
			if c.Outcome == redisstore.Settled {
				break
			}
			e.check(round < 20, "lanes never drain")
			e.eq(c.Outcome, redisstore.Claimed, "round %d", round)
			lanes := map[string]bool{}
			for _, h := range c.Heads {
				key := h.Consumer + "/" + h.Lane
				e.check(!lanes[key], "two heads of lane %s at once", key)
				lanes[key] = true
				e.eq(h.Kind, a2redis.LaneCursor, "kind")
				// The next event of the lane is not claimable while its head runs.
				busy := e.claim(redisstore.ClaimRequest{Holder: "w2", Consumers: []a2redis.Consumer{{Name: h.Consumer}}})
				e.check(busy.Outcome != redisstore.Claimed, "lane %s handed out a second head: %v", key, headRefs(busy.Heads))
			}
			for _, h := range c.Heads {
				order = append(order, refOf(h.Ref()))
				e.complete(h)
			}
		}
		perLane := map[string][]int64{}
		for _, ref := range order {
			var key string
			var idx int64
			fmt.Sscanf(strings.Replace(ref, "@", " ", 1), "%s %d", &key, &idx)
			perLane[key] = append(perLane[key], idx)
		}
		e.eq(perLane, map[string][]int64{"c/a": {1, 3, 5}, "c/b": {2, 4, 6}, "d/a": {1, 2, 3, 4, 5, 6}},
			"each lane ran its events in append order, one at a time")
		e.eq(cursorLines(e.cursors("s")), []string{
			"lane c/a pos=5 head=0 att=0 fail=0 dead=false",
			"lane c/b pos=6 head=0 att=0 fail=0 dead=false",
			"lane d/a pos=6 head=0 att=0 fail=0 dead=false",
		}, "idle lane cursors keep their positions")
	})

	contract("Cursors/LogCursorReadsTheWholeLogByType", func(t *testing.T, e *env) {
		all := logc("audit", "all", false)
		typed := logc("bill", "money", false, "paid", "refunded")
		served := []a2redis.Consumer{all, typed, {Name: "c"}}
		e.append("s", ev("before")) // before the log consumers exist
		r := e.appendServed("s", served, ev("noise"), ev("paid", to("c")), ev("noise"), ev("refunded"))
		e.check(r.HasPending, "log cursors started")
		var runs []string
		for {
			c := e.claim(redisstore.ClaimRequest{Consumers: served})
			if c.Outcome != redisstore.Claimed {
				break
			}
			for _, h := range c.Heads {
				runs = append(runs, fmt.Sprintf("%s %s %s", h.Kind, refOf(h.Ref()), h.Type))
				e.complete(h)
			}
		}
		e.eq(runs, []string{
			"log audit/all@2 noise", "log bill/money@3 paid", "event c@3 paid",
			"log audit/all@3 paid", "log bill/money@5 refunded",
			"log audit/all@4 noise", "log audit/all@5 refunded",
		}, "a log cursor starts at the append that created it and takes only its types, one at a time")
		e.append("s", ev("paid")) // unserved append: no log cursor moves
		e.eq(e.claim(redisstore.ClaimRequest{Consumers: served}).Outcome, redisstore.Settled, "an unserved append wakes no log cursor")
		w, err := e.store.WakeLog(e.ctx, "s", typed)
		e.no(err, "wake")
		e.eq([]int64{w.Cursor.Position, w.Cursor.Head, w.SessionHead}, []int64{5, 6, 6}, "WakeLog takes the next stored event of its types")
		e.eq(e.cursors("s")[0].Kind, a2redis.LogCursor, "log cursors are listed")

		// The clear marker is never taken.
		e.clearSession("s")
		e.eq(e.claim(redisstore.ClaimRequest{Consumers: served}).Outcome, redisstore.Settled, "no head survives a clear; the marker is not an event to run")
	})

	contract("Cursors/LogBackfillAndWake", func(t *testing.T, e *env) {
		e.appendN("s", 30, func(i int) a2redis.Event {
			if i%10 == 9 {
				return ev("rare")
			}
			return ev("common")
		})
		// A missing cursor: backfill starts at the beginning of the lifetime,
		// else at the session head with nothing to run.
		w, err := e.store.WakeLog(e.ctx, "s", logc("late", "l", true, "rare"))
		e.no(err, "wake backfill")
		e.eq([]int64{w.Cursor.Position, w.Cursor.Head, w.SessionHead}, []int64{0, 10, 30}, "backfill")
		w, err = e.store.WakeLog(e.ctx, "s", logc("now", "l", false, "rare"))
		e.no(err, "wake")
		e.eq([]int64{w.Cursor.Position, w.Cursor.Head}, []int64{30, 0}, "no backfill: starts at the head")
		// One with a head keeps it.
		w, err = e.store.WakeLog(e.ctx, "s", logc("late", "l", true, "rare"))
		e.no(err, "wake again")
		e.eq(w.Cursor.Head, int64(10), "a cursor with a head keeps it")
		e.append("s", ev("rare"))
		w, err = e.store.WakeLog(e.ctx, "s", logc("now", "l", false, "rare"))
		e.no(err, "wake idle")
		e.eq([]int64{w.Cursor.Position, w.Cursor.Head}, []int64{30, 31}, "an idle cursor takes the next stored event")

		// Backfill through an append: a new backfilling consumer starts at the
		// lifetime's first event it takes.
		r := e.appendServed("s", []a2redis.Consumer{logc("bf", "x", true, "common")}, ev("common"))
		e.check(r.HasPending, "pending")
		c := e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "bf"}}})
		e.eq(headRefs(c.Heads), []string{"bf/x@1"}, "backfill from the first event")

		// A session with nothing after its marker leaves a missing cursor
		// missing.
		w, err = e.store.WakeLog(e.ctx, "fresh", logc("g", "l", true))
		e.no(err, "wake on an empty session")
		e.eq(w.Cursor, a2redis.Cursor{Consumer: "g", Lane: "l", Kind: a2redis.LogCursor}, "empty session")
		e.eq(len(e.cursors("fresh")), 0, "no cursor created")
		_, err = e.store.WakeLog(e.ctx, "s", a2redis.Consumer{Name: "g"})
		e.is(err, a2redis.ErrInvalidArgument, "WakeLog without a log")
	})

	// §5: a typed log cursor finds its events through a type index that is
	// back-filled in pages.
	contract("Cursors/TypedLogOverALongHistory", func(t *testing.T, e *env) {
		e.appendN("s", 2500, func(i int) a2redis.Event {
			if i == 1200 || i == 2499 {
				return ev("rare")
			}
			return ev("common")
		})
		w, err := e.store.WakeLog(e.ctx, "s", logc("late", "l", true, "rare"))
		e.no(err, "wake")
		e.eq(w.Cursor.Head, int64(1201), "the back-filled index finds the first rare event")
		c := e.claim(redisstore.ClaimRequest{})
		e.complete(c.Heads[0])
		c = e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"late/l@2500"}, "then the next")
		e.complete(c.Heads[0])
		e.eq(e.claim(redisstore.ClaimRequest{}).Outcome, redisstore.Settled, "then none")
		r := e.appendServed("s", []a2redis.Consumer{logc("late", "l", true, "rare")}, ev("common"), ev("rare"))
		e.check(r.HasPending, "the next rare event wakes it")
		e.eq(headRefs(e.claim(redisstore.ClaimRequest{}).Heads), []string{"late/l@2502"}, "the new one")
	})

	// §1 claims: a claim bumps the attempt and holds the head for its lease;
	// busy reports the earliest time a held head frees.
	contract("Claim/LeaseBusyAndSettled", func(t *testing.T, e *env) {
		e.eq(e.claim(redisstore.ClaimRequest{}).Outcome, redisstore.Settled, "an empty session is settled")
		e.append("s", ev("t", to("a")), ev("t", to("b")))
		now := e.clock.Now()
		c := e.claim(redisstore.ClaimRequest{TTL: 30 * time.Second, Limit: 1})
		e.eq(headRefs(c.Heads), []string{"a@1"}, "limit 1 takes the lowest index")
		h := c.Heads[0]
		e.eq([]int64{h.Attempts, h.FirstClaimedAt.UnixMilli(), h.LastClaimedAt.UnixMilli(), h.ClaimExpiresAt.UnixMilli()},
			[]int64{1, now.UnixMilli(), now.UnixMilli(), now.Add(30 * time.Second).UnixMilli()}, "claim columns")
		at := now.Add(10 * time.Second)
		c = e.claim(redisstore.ClaimRequest{ExpiresAt: at})
		e.eq(c.Heads[0].ClaimExpiresAt.UnixMilli(), at.UnixMilli(), "an absolute expiry")
		busy := e.claim(redisstore.ClaimRequest{Holder: "w2"})
		e.eq([]any{busy.Outcome, busy.RetryAt.UnixMilli()}, []any{redisstore.Busy, at.UnixMilli()}, "busy until the earliest expiry")
		e.clock.Advance(10 * time.Second)
		c = e.claim(redisstore.ClaimRequest{Holder: "w2"})
		e.eq(headRefs(c.Heads), []string{"b@2"}, "the lapsed claim is taken over")
		e.eq([]any{c.Heads[0].Attempts, c.Heads[0].Failures, c.Heads[0].FirstClaimedAt.UnixMilli(), c.Heads[0].Holder},
			[]any{2, 1, now.UnixMilli(), "w2"}, "takeover: next attempt, a failure counted, first claim kept")

		for _, bad := range []redisstore.ClaimRequest{
			{Session: "s", TTL: time.Second},
			{Session: "s", Holder: "h"},
			{Session: "s", Holder: "h", TTL: -time.Second},
			{Session: "s", Holder: "h", TTL: time.Second, MaxFailures: -1},
			{Session: "s", Holder: "h", TTL: time.Second, Through: -1},
			{Session: "s", Holder: "h", TTL: time.Second, Limit: -1},
			{Session: "", Holder: "h", TTL: time.Second},
			{Session: "s", Holder: "h", TTL: time.Second, Exclude: []a2redis.HeadRef{{Index: 1}}},
		} {
			_, err := e.store.ClaimAvailable(e.ctx, bad)
			e.is(err, a2redis.ErrInvalidArgument, "claim %+v", bad)
		}
	})

	// §5: through claims only heads ≤ through; exclude skips named heads;
	// consumers restricts to served consumers; limit bounds one call.
	contract("Claim/ThroughExcludeServedLimit", func(t *testing.T, e *env) {
		for i := range 6 {
			e.append("s", ev("t", to([]string{"a", "b"}[i%2])))
		}
		e.append("s", ev("t", lane("a", "x")), ev("t", lane("a", "x")))
		c := e.claim(redisstore.ClaimRequest{Through: 3, Exclude: []a2redis.HeadRef{{Consumer: "a", Index: 1}}})
		e.eq(headRefs(c.Heads), []string{"b@2", "a@3"}, "through 3, a@1 excluded")
		c = e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "b"}}, Limit: 1})
		e.eq(headRefs(c.Heads), []string{"b@4"}, "served b, limit 1")
		c = e.claim(redisstore.ClaimRequest{Exclude: []a2redis.HeadRef{{Consumer: "a", Lane: "x", Index: 999}}})
		e.eq(headRefs(c.Heads), []string{"a@1", "a@5", "b@6"}, "a lane is excluded by name, whatever the index")
		c = e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{}})
		e.eq(c.Outcome, redisstore.Settled, "serving no consumer claims nothing")
		c = e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"a/x@7"}, "the rest")
	})

	// A limited claim takes the lowest indexes first, whether their heads
	// are free or held by claims that lapsed.
	contract("Claim/LimitTakesLowestIndexesFirst", func(t *testing.T, e *env) {
		const n = 40
		e.appendN("s", n, func(int) a2redis.Event { return ev("t", to("c")) })
		e.append("s", ev("t", to("free")))
		// Hold every head of c, the lower the index the later its lease ends.
		start := e.clock.Now()
		for i := 1; i <= n; i++ {
			c := e.claim(redisstore.ClaimRequest{Limit: 1, Consumers: []a2redis.Consumer{{Name: "c"}}, ExpiresAt: start.Add(time.Duration(2*n-i) * time.Second)})
			e.eq(headRefs(c.Heads), []string{fmt.Sprintf("c@%d", i)}, "hold c@%d", i)
		}
		e.clock.Advance(time.Hour)
		var got []string
		for range 3 {
			got = append(got, headRefs(e.claim(redisstore.ClaimRequest{Holder: "w2", Limit: 1}).Heads)...)
		}
		e.eq(got, []string{"c@1", "c@2", "c@3"}, "a limited claim takes the lowest eligible indexes (lapsed claims here), not the earliest lapsed leases")
		c := e.claim(redisstore.ClaimRequest{Holder: "w2", Limit: 100})
		e.eq(len(c.Heads), n-3+1, "the rest, the free head included")
		e.eq(headRefs(c.Heads)[n-3], fmt.Sprintf("free@%d", n+1), "the free head comes last")
	})

	// §1: a claim whose lease lapsed counts as a failure when taken over,
	// and can dead-letter without running (maxFailures applies to lapsed
	// takeovers).
	contract("Claim/LapsedTakeoverDeadLetters", func(t *testing.T, e *env) {
		e.append("s", ev("t", lane("c", "x")), ev("t", lane("c", "x")))
		e.claim(redisstore.ClaimRequest{TTL: time.Second})
		e.clock.Advance(time.Hour)
		c := e.claim(redisstore.ClaimRequest{TTL: time.Second, MaxFailures: 3})
		e.eq([]int64{c.Heads[0].Attempts, c.Heads[0].Failures}, []int64{2, 1}, "first takeover")
		e.clock.Advance(time.Hour)
		c = e.claim(redisstore.ClaimRequest{TTL: time.Second, MaxFailures: 2})
		e.eq([]any{c.Outcome, len(c.Heads), headRefs(c.DeadLettered)}, []any{redisstore.Claimed, 0, []string{"c/x@1"}}, "the second takeover reaches max failures")
		d := c.DeadLettered[0]
		e.eq([]any{d.Attempts, d.Failures, d.Holder, d.ClaimExpiresAt.IsZero(), d.DeadLetteredAt.UnixMilli()},
			[]any{3, 2, "", true, e.clock.Now().UnixMilli()}, "dead-lettered unrun")
		e.eq(e.claim(redisstore.ClaimRequest{}).Outcome, redisstore.Settled, "a dead-lettered lane head blocks its lane")
		dead, err := e.store.DeadLetters(e.ctx, "s")
		e.no(err, "dead letters")
		e.eq(headRefs(dead), []string{"c/x@1"}, "listed")
	})

	// A takeover says why in the head's last error: whose lease ran out
	// when, who took it over when; a head lost alone counts the failure, at
	// the takeover's time and the lapsed attempt.
	contract("Claim/TakeoverSaysWhy", func(t *testing.T, e *env) {
		e.append("s", ev("t", lane("c", "x")))
		first := e.claim(redisstore.ClaimRequest{Holder: "w1", TTL: time.Second}).Heads[0]
		e.clock.Advance(time.Minute)
		h := e.claim(redisstore.ClaimRequest{Holder: "w2", TTL: time.Second}).Heads[0]
		at := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
		e.eq(h.LastError, "lease expired: held by w1 until "+at(first.ClaimExpiresAt)+", taken over by w2 at "+at(e.clock.Now()), "the reason")
		e.eq([]int64{h.Failures, h.LastFailedAttempt, h.LastFailedAt.UnixMilli()}, []int64{1, 1, e.clock.Now().UnixMilli()}, "the failure it counts")
		cursors, err := e.store.Cursors(e.ctx, "s")
		e.no(err, "cursors")
		e.eq(len(cursors), 1, "one cursor")
	})

	// §5 attempt fencing: after a lease lapses and another holder claims,
	// the first holder's complete / fail / caused append / clear / renew are
	// superseded, and nothing is written.
	contract("Claim/AttemptFencing", func(t *testing.T, e *env) {
		e.append("s", ev("t", to("c")), ev("t", lane("l", "x")))
		first := e.claim(redisstore.ClaimRequest{Holder: "w1", TTL: time.Second})
		e.clock.Advance(2 * time.Second)
		second := e.claim(redisstore.ClaimRequest{Holder: "w2"})
		e.eq(len(second.Heads), 1, "a takeover runs alone")
		// The other head w1 lost with it was released; it is claimed again.
		again := e.claim(redisstore.ClaimRequest{Holder: "w2"})
		e.eq(len(again.Heads), 1, "the released head")
		for _, h := range append(second.Heads, again.Heads...) {
			e.eq([]int64{h.Attempts, h.Failures}, []int64{2, 0}, "lost together: no failure counted for %s", refOf(h.Ref()))
		}
		for i, old := range first.Heads {
			r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: old.Ref(), Attempt: old.Attempts, Events: []a2redis.Event{ev("x")}})
			e.no(err, "stale complete")
			e.eq(r.Outcome, redisstore.CompleteSuperseded, "stale complete of %s", refOf(old.Ref()))
			f, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: old.Ref(), Attempt: old.Attempts, MaxFailures: 1})
			e.no(err, "stale fail")
			e.eq([]any{f.Outcome, f.Failures}, []any{redisstore.FailSuperseded, 0}, "stale fail reports the current failures")
			cause := old.Cause()
			_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Cause: &cause}}, redisstore.AppendOptions{})
			e.is(err, a2redis.ErrSupersededAttempt, "stale caused append")
			var sup *a2redis.SupersededError
			e.check(errorsAs(err, &sup), "a *SupersededError: %v", err)
			e.eq(sup.Cause, cause, "it names the cause")
			_, err = e.store.Clear(e.ctx, "s", redisstore.ClearOptions{Cause: &cause})
			e.is(err, a2redis.ErrSupersededAttempt, "stale caused clear")
			rn, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: []redisstore.Attempt{redisstore.AttemptOf(old)}})
			e.no(err, "stale renew")
			e.eq(rn.Superseded, []a2redis.HeadRef{old.Ref()}, "stale renew %d", i)
		}
		e.eq(e.bounds("s").Head, int64(2), "nothing was appended")
		// A caused append of the current attempt commits; a clear caused by it
		// too, and ends the lifetime.
		cur := second.Heads[0]
		cause := cur.Cause()
		r, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "x", Cause: &cause}}, redisstore.AppendOptions{})
		e.no(err, "current caused append")
		e.eq(r.Events[0].Cause, &cause, "the stored cause")
		e.eq(e.read("s")[2].Cause, &cause, "the cause reads back")
		cr, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{Cause: &cause})
		e.no(err, "current caused clear")
		e.eq(cr, redisstore.ClearResult{Cleared: true, Index: 4, ClearIndex: 4}, "cleared")
	})

	contract("Claim/RenewExtendsLiveClaimsOnly", func(t *testing.T, e *env) {
		e.append("s", ev("t", lane("c", "x")), ev("t", lane("c", "x")), ev("t", to("d")))
		c := e.claim(redisstore.ClaimRequest{TTL: 10 * time.Second})
		e.eq(headRefs(c.Heads), []string{"c/x@1", "d@3"}, "claimed")
		lh, dh := c.Heads[0], c.Heads[1]
		claims := []redisstore.Attempt{
			redisstore.AttemptOf(dh),
			redisstore.AttemptOf(lh),
			{Head: a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 2}, Attempt: 1}, // not reached yet
			{Head: a2redis.HeadRef{Consumer: "zz", Index: 1}, Attempt: 1},           // no such cursor
		}
		r, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: claims})
		e.no(err, "renew")
		e.eq(r.Renewed, []a2redis.HeadRef{lh.Ref(), dh.Ref()}, "renewed, sorted by index")
		e.eq(r.Superseded, []a2redis.HeadRef{}, "none superseded")
		e.clock.Advance(30 * time.Second)
		e.eq(e.claim(redisstore.ClaimRequest{Holder: "w2"}).Outcome, redisstore.Busy, "renewed claims still hold")
		r, err = e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w2", TTL: time.Minute, Claims: claims[:2]})
		e.no(err, "renew by another holder")
		e.check(len(r.Renewed) == 0 && len(r.Superseded) == 0, "another holder renews nothing: %+v", r)
		e.complete(lh)
		r, err = e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: claims[:2]})
		e.no(err, "renew after completion")
		e.eq([]any{r.Renewed, r.Superseded}, []any{[]a2redis.HeadRef{dh.Ref()}, []a2redis.HeadRef{lh.Ref()}}, "a completed head is superseded")
		e.clock.Advance(2 * time.Minute)
		r, err = e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute, Claims: claims[:1]})
		e.no(err, "renew after the lease lapsed")
		e.check(len(r.Renewed) == 0 && len(r.Superseded) == 0, "a lapsed claim nobody took over is in neither list: %+v", r)
		r, err = e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w1", TTL: time.Minute})
		e.no(err, "renew nothing")
		e.check(r.Renewed != nil && r.Superseded != nil, "empty lists, not nil")
	})

	// §1 CompleteAttempt: moves the cursor past its head and atomically
	// appends the returned events; a lost-ack retry replays them.
	contract("Complete/ReturnedEventsAndRetries", func(t *testing.T, e *env) {
		e.append("s", ev("order", lane("mail", "acct")), ev("order", lane("mail", "acct")))
		h := e.claim(redisstore.ClaimRequest{}).Heads[0]
		e.clock.Advance(time.Second)
		done := e.complete(h, evID("sent-1", "mail.sent", to("audit")), ev("mail.logged"))
		e.eq([]any{done.Outcome, done.Replayed, indexes(done.Events)}, []any{redisstore.Completed, false, []int64{3, 4}}, "completed with two events")
		want := a2redis.Cause{Consumer: "mail", Lane: "acct", Index: 1, Attempt: 1}
		for _, got := range done.Events {
			e.eq(got.Cause, &want, "returned events carry the attempt as cause")
			e.eq(got.CreatedAt.UnixMilli(), e.clock.Now().UnixMilli(), "created now")
		}
		e.eq(e.read("s")[2:], done.Events, "stored as returned")
		c := e.claim(redisstore.ClaimRequest{})
		e.eq(headRefs(c.Heads), []string{"mail/acct@2", "audit@3"}, "the lane moved on; the returned event's target runs")

		// A lost-ack retry replays; other ids are a partial duplicate; a
		// stale or unknown attempt is superseded; no event is ErrNoEvent.
		e.clock.Advance(time.Second)
		again := e.complete(h, evID("sent-1", "mail.sent", to("audit")), a2redis.Event{ID: done.Events[1].ID, Type: "mail.logged"})
		e.eq([]any{again.Outcome, again.Replayed, again.Events}, []any{redisstore.Completed, true, done.Events}, "replay")
		_, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: 1, Events: []a2redis.Event{evID("other", "x")}})
		e.is(err, a2redis.ErrPartialDuplicateBatch, "retry with other ids")
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: 1, Events: []a2redis.Event{evID("sent-1", "mail.sent")}})
		e.is(err, a2redis.ErrPartialDuplicateBatch, "retry with fewer ids")
		stale, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: 2})
		e.no(err, "other attempt")
		e.eq(stale.Outcome, redisstore.CompleteSuperseded, "another attempt of a completed head")
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: a2redis.HeadRef{Consumer: "mail", Lane: "acct", Index: 99}, Attempt: 1})
		e.is(err, a2redis.ErrNoEvent, "no event at 99")
		e.eq(e.bounds("s").Head, int64(4), "nothing appended twice")

		// Returned ids clashing with stored ones: partial duplicate, the head
		// stays claimed.
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, Events: []a2redis.Event{evID("sent-1", "x")}})
		e.is(err, a2redis.ErrPartialDuplicateBatch, "returned id already stored")
		_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: c.Heads[0].Ref(), Attempt: c.Heads[0].Attempts, Events: []a2redis.Event{{Type: "x", Cause: &want}}})
		e.is(err, a2redis.ErrInvalidArgument, "returned events may not name a cause")
		e.eq(e.complete(c.Heads[0]).Outcome, redisstore.Completed, "the head is still the attempt's to complete")
		replay := e.complete(c.Heads[0])
		e.eq([]any{replay.Outcome, replay.Replayed, len(replay.Events)}, []any{redisstore.Completed, true, 0}, "replay of an empty completion")
	})

	// §1 FailAttempt: counts a failure, records the error, optionally holds
	// the head until now + retryAfter, and dead-letters at maxFailures.
	contract("Fail/RetryHoldDeadLetterAndRedrive", func(t *testing.T, e *env) {
		e.append("s", ev("t", lane("c", "x")), ev("t", lane("c", "x")), ev("t", to("e")))
		c := e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}})
		h := c.Heads[0]
		fail := redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 2, RetryAfter: 10 * time.Second}
		f, err := e.store.FailAttempt(e.ctx, fail)
		e.no(err, "fail")
		e.eq(f, redisstore.FailResult{Outcome: redisstore.Failed, Failures: 1}, "first failure")
		again, err := e.store.FailAttempt(e.ctx, fail)
		e.no(err, "fail again")
		e.eq(again, f, "reporting the same failure again is idempotent")
		busy := e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}})
		e.eq([]any{busy.Outcome, busy.RetryAt.UnixMilli()}, []any{redisstore.Busy, e.clock.Now().Add(10 * time.Second).UnixMilli()}, "held until the retry time")
		e.clock.Advance(10 * time.Second)
		h = e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}}).Heads[0]
		e.eq([]any{h.Attempts, h.Failures, h.LastError, h.LastFailedAttempt}, []any{2, 1, "boom", 1}, "a retry hold is not a lapsed claim")
		fail.Attempt, fail.Error = h.Attempts, "bang"
		f, err = e.store.FailAttempt(e.ctx, fail)
		e.no(err, "fail")
		e.eq(f, redisstore.FailResult{Outcome: redisstore.DeadLettered, Failures: 2}, "dead-lettered at max failures")
		f, err = e.store.FailAttempt(e.ctx, fail)
		e.no(err, "fail a dead letter again")
		e.eq(f.Outcome, redisstore.DeadLettered, "repeat on a dead letter")
		e.eq(e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}}).Outcome, redisstore.Settled, "a dead-lettered lane head blocks its lane")
		dead, err := e.store.DeadLetters(e.ctx, "s")
		e.no(err, "dead letters")
		e.eq(headRefs(dead), []string{"c/x@1"}, "listed")
		e.eq([]any{dead[0].LastError, dead[0].Failures, dead[0].DeadLetteredAt.UnixMilli(), dead[0].Kind}, []any{"bang", 2, e.clock.Now().UnixMilli(), a2redis.LaneCursor}, "dead letter columns")
		r, err := e.store.Append(e.ctx, "s", nil, redisstore.AppendOptions{Consumers: []a2redis.Consumer{{Name: "c"}}})
		e.no(err, "empty append")
		e.check(!r.HasPending, "a dead letter is not pending")

		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Retry})
		e.no(err, "retry")
		e.eq(rd, redisstore.RedriveResult{Redriven: true, HasPending: true}, "retried")
		h = e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}}).Heads[0]
		e.eq([]any{refOf(h.Ref()), h.Failures, h.Attempts}, []any{"c/x@1", 0, 3}, "runnable again, failures cleared")
		e.fail(h, 1, 0)
		rd, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Skip})
		e.no(err, "skip")
		e.check(rd.Redriven, "skipped")
		e.eq(headRefs(e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "c"}}}).Heads), []string{"c/x@2"}, "the lane moved past the skipped head")
		rd, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: redisstore.Skip})
		e.no(err, "skip again")
		e.check(!rd.Redriven, "nothing dead-lettered there any more")
		skipped, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 1}, Attempt: 3})
		e.no(err, "complete skipped")
		e.eq(skipped.Outcome, redisstore.CompleteSuperseded, "a skipped head cannot be completed")
		_, err = e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "c", Lane: "x", Index: 1, Action: "later"})
		e.is(err, a2redis.ErrInvalidArgument, "unknown action")
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: h.Ref(), Attempt: 1, MaxFailures: -1})
		e.is(err, a2redis.ErrInvalidArgument, "negative max failures")
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: a2redis.HeadRef{Consumer: "c", Lane: "x", Index: 50}, Attempt: 1, MaxFailures: 1})
		e.is(err, a2redis.ErrNoEvent, "fail at an index with no event")
	})

	// §1: the head of an event cursor dead-letters alone; other consumers of
	// the event go on.
	contract("Fail/EventCursorDeadLetterAndSkip", func(t *testing.T, e *env) {
		e.append("s", ev("t", to("a"), to("b")))
		c := e.claim(redisstore.ClaimRequest{})
		e.fail(c.Heads[0], 1, 0)
		dead, err := e.store.DeadLetters(e.ctx, "s")
		e.no(err, "dead letters")
		e.eq(headRefs(dead), []string{"a@1"}, "a's head dead-lettered")
		e.eq(dead[0].Kind, a2redis.EventCursor, "kind")
		e.eq(cursorLines(e.cursors("s")), []string{
			"event a/ pos=0 head=1 att=1 fail=1 dead=true",
			"event b/ pos=0 head=1 att=1 fail=0 dead=false",
		}, "a dead event cursor stays listed")
		rd, err := e.store.Redrive(e.ctx, redisstore.RedriveRequest{Session: "s", Consumer: "a", Index: 1, Action: redisstore.Skip, Consumers: []a2redis.Consumer{{Name: "a"}}})
		e.no(err, "skip")
		e.eq(rd, redisstore.RedriveResult{Redriven: true}, "skipped; a has nothing left")
		e.complete(c.Heads[1])
		e.eq(len(e.cursors("s")), 0, "both done")
	})

	// §5: many holders race over every kind of cursor; each head is
	// completed exactly once and lanes stay in order.
	contract("Claim/ConcurrentHoldersCompleteEverythingOnce", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "ev"}, {Name: "ln"}, logc("lg", "all", false, "t")}
		const events = 60
		for i := range events {
			e.appendServed("s", served, ev("t", to("ev"), lane("ln", fmt.Sprintf("l%d", i%3))))
		}
		// earlier lists the events a lane or log cursor must have finished
		// before it may hand out a head.
		earlier := func(h a2redis.HeadEvent) []string {
			var out []string
			for j := int64(1); j < h.Index; j++ {
				if h.Consumer == "lg" || (j-1)%3 == (h.Index-1)%3 {
					out = append(out, refOf(a2redis.HeadRef{Consumer: h.Consumer, Lane: h.Lane, Index: j}))
				}
			}
			return out
		}
		var mu sync.Mutex
		started := map[string]int{} // completions issued, by head
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder := fmt.Sprintf("w%d", w)
				for idle := 0; idle < 2000; {
					c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: holder, TTL: time.Hour, Limit: 4, Consumers: served})
					if err != nil {
						errs <- err
						return
					}
					if c.Outcome == redisstore.Settled {
						return
					}
					if c.Outcome == redisstore.Busy {
						idle++
						time.Sleep(time.Millisecond)
						continue
					}
					for _, h := range c.Heads {
						mu.Lock()
						if h.Kind != a2redis.EventCursor {
							for _, ref := range earlier(h) {
								if started[ref] == 0 {
									mu.Unlock()
									errs <- fmt.Errorf("%s was handed out before %s finished", refOf(h.Ref()), ref)
									return
								}
							}
						}
						started[refOf(h.Ref())]++
						mu.Unlock()
						r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: h.Ref(), Attempt: h.Attempts, Consumers: served})
						if err != nil {
							errs <- err
							return
						}
						if r.Outcome != redisstore.Completed {
							errs <- fmt.Errorf("%s: %s", refOf(h.Ref()), r.Outcome)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.no(err, "holder")
		}
		e.eq(len(started), events*3, "every head completed")
		for ref, n := range started {
			e.check(n == 1, "%s handed out %d times", ref, n)
		}
	})

	contract("Cursors/ListingOrderAndContent", func(t *testing.T, e *env) {
		served := []a2redis.Consumer{{Name: "b"}, {Name: "a"}, logc("a", "log", false)}
		e.appendServed("s", served, ev("t", to("b"), lane("a", "z"), to("a")), ev("t", to("a"), lane("a", "m")))
		e.clock.Advance(time.Second)
		c := e.claim(redisstore.ClaimRequest{Consumers: []a2redis.Consumer{{Name: "a"}}, Through: 1})
		e.eq(headRefs(c.Heads), []string{"a@1", "a/log@1", "a/z@1"}, "heads at 1 sorted by consumer (ties keep the store's order)")
		got := e.cursors("s")
		e.eq(cursorLines(got), []string{
			"log a/log pos=0 head=1 att=1 fail=0 dead=false",
			"lane a/m pos=0 head=2 att=0 fail=0 dead=false",
			"lane a/z pos=0 head=1 att=1 fail=0 dead=false",
			"event a/ pos=0 head=1 att=1 fail=0 dead=false",
			"event a/ pos=1 head=2 att=0 fail=0 dead=false",
			"event b/ pos=0 head=1 att=0 fail=0 dead=false",
		}, "by consumer, lanes before event cursors, by lane, by head")
		e.eq([]any{got[0].Holder, got[0].ClaimExpiresAt.UnixMilli(), got[1].Holder}, []any{"w1", e.clock.Now().Add(time.Minute).UnixMilli(), ""}, "dispatch columns")
	})
}
