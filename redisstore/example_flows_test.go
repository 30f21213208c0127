package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// exampleCtx bounds an example.
func exampleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// appendOrder appends one order.placed event for the given targets.
func appendOrder(ctx context.Context, store *redisstore.Store, session, id string, targets ...a2redis.Target) {
	_, err := store.Append(ctx, session, []a2redis.Event{{ID: id, Type: "order.placed", Targets: targets}}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}
}

// claimOne claims the session's runnable heads as holder and prints what
// the claim did.
func claimOne(ctx context.Context, store *redisstore.Store, clock *exampleClock, session, holder string) []a2redis.HeadEvent {
	claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{
		Session: session, Holder: holder, TTL: 30 * time.Second, MaxFailures: 5,
	})
	if err != nil {
		panic(err)
	}
	switch claim.Outcome {
	case redisstore.Claimed:
		for _, h := range claim.Heads {
			fmt.Printf("%s claimed %s #%d, attempt %d\n", holder, h.Consumer, h.Index, h.Attempts)
		}
	case redisstore.Busy:
		fmt.Printf("%s: busy until %s\n", holder, clock.at(claim.RetryAt))
	default:
		fmt.Printf("%s: %s\n", holder, claim.Outcome)
	}
	return claim.Heads
}

// headList prints heads as [consumer #index …].
func headList(heads []a2redis.HeadRef) string {
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = fmt.Sprintf("%s #%d", h.Consumer, h.Index)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// A failed attempt is counted and can hold its head back for a while; at
// MaxFailures the head is dead-lettered and its cursor stops there.
func ExampleStore_FailAttempt() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	appendOrder(ctx, store, "order-1", "placed", a2redis.Target{Consumer: "mailer"})

	for range 3 {
		head := claimOne(ctx, store, clock, "order-1", "worker-1")[0]
		res, err := store.FailAttempt(ctx, redisstore.FailRequest{
			Session: "order-1", Head: head.Ref(), Attempt: head.Attempts,
			Error:       "smtp: connection refused",
			MaxFailures: 3,           // production: 5 or so, with a backoff
			RetryAfter:  time.Minute, // hold the head back before the next try
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("  %s, %d failures\n", res.Outcome, res.Failures)
		if res.Outcome == redisstore.Failed {
			claimOne(ctx, store, clock, "order-1", "worker-1") // held back: busy
			clock.advance(time.Minute)
		}
	}
	claimOne(ctx, store, clock, "order-1", "worker-1")

	dead, err := store.DeadLetters(ctx, "order-1")
	if err != nil {
		panic(err)
	}
	for _, h := range dead {
		fmt.Printf("dead letter: %s #%d %s, %d failures, last error %q\n", h.Consumer, h.Index, h.Type, h.Failures, h.LastError)
	}
	// Output:
	// worker-1 claimed mailer #1, attempt 1
	//   failed, 1 failures
	// worker-1: busy until 03:05:05
	// worker-1 claimed mailer #1, attempt 2
	//   failed, 2 failures
	// worker-1: busy until 03:06:05
	// worker-1 claimed mailer #1, attempt 3
	//   dead_lettered, 3 failures
	// worker-1: settled
	// dead letter: mailer #1 order.placed, 3 failures, last error "smtp: connection refused"
}

// A handler that runs longer than its lease renews it; a claim that lapsed
// and was taken over is superseded, and its holder must stop.
func ExampleStore_RenewClaims() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	appendOrder(ctx, store, "order-1", "placed", a2redis.Target{Consumer: "mailer"})

	head := claimOne(ctx, store, clock, "order-1", "worker-1")[0] // a 30s lease
	held := []redisstore.Attempt{redisstore.AttemptOf(head)}
	renew := func() {
		r, err := store.RenewClaims(ctx, redisstore.RenewRequest{Session: "order-1", Holder: "worker-1", Claims: held, TTL: 30 * time.Second})
		if err != nil {
			panic(err)
		}
		fmt.Printf("renewed %s, superseded %s\n", headList(r.Renewed), headList(r.Superseded))
	}

	clock.advance(10 * time.Second) // renew at about a third of the lease
	renew()
	cursors, err := store.Cursors(ctx, "order-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("lease now ends at", clock.at(cursors[0].ClaimExpiresAt))

	// worker-1 stalls past its lease: worker-2 takes the head over (the
	// lapse counts as a failure), and worker-1's renewal finds it lost.
	clock.advance(time.Minute)
	claimOne(ctx, store, clock, "order-1", "worker-2")
	renew()
	// Output:
	// worker-1 claimed mailer #1, attempt 1
	// renewed [mailer #1], superseded []
	// lease now ends at 03:04:45
	// worker-2 claimed mailer #1, attempt 2
	// renewed [], superseded [mailer #1]
}

// A dead letter stays until an operator (or code) redrives it: Retry runs it
// again with its failures cleared, Skip moves the cursor past it.
func ExampleStore_Redrive() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	appendOrder(ctx, store, "order-1", "placed", a2redis.Target{Consumer: "mailer"})
	appendOrder(ctx, store, "order-1", "placed-again", a2redis.Target{Consumer: "mailer"})

	for _, head := range claimOne(ctx, store, clock, "order-1", "worker-1") {
		_, err := store.FailAttempt(ctx, redisstore.FailRequest{
			Session: "order-1", Head: head.Ref(), Attempt: head.Attempts, Error: "boom", MaxFailures: 1,
		})
		if err != nil {
			panic(err)
		}
	}
	claimOne(ctx, store, clock, "order-1", "worker-1") // both dead-lettered

	for _, r := range []redisstore.RedriveRequest{
		{Session: "order-1", Consumer: "mailer", Index: 1, Action: redisstore.Retry},
		{Session: "order-1", Consumer: "mailer", Index: 2, Action: redisstore.Skip},
	} {
		res, err := store.Redrive(ctx, r)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s #%d: redriven %v\n", r.Action, r.Index, res.Redriven)
	}
	for _, head := range claimOne(ctx, store, clock, "order-1", "worker-1") {
		fmt.Printf("  failures before this attempt: %d\n", head.Failures)
	}
	dead, err := store.DeadLetters(ctx, "order-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters left:", len(dead))
	// Output:
	// worker-1 claimed mailer #1, attempt 1
	// worker-1 claimed mailer #2, attempt 1
	// worker-1: settled
	// retry #1: redriven true
	// skip #2: redriven true
	// worker-1 claimed mailer #1, attempt 2
	//   failures before this attempt: 0
	// dead letters left: 0
}

// When the handlers return no events, one script call completes every head
// a claim gave the worker.
func ExampleStore_CompleteAttempts() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	for _, id := range []string{"a", "b", "c"} {
		appendOrder(ctx, store, "order-1", id, a2redis.Target{Consumer: "mailer"})
	}

	heads := claimOne(ctx, store, clock, "order-1", "worker-1")
	done := make([]redisstore.Attempt, len(heads))
	for i, head := range heads {
		// ... handle head.Payload ...
		done[i] = redisstore.AttemptOf(head)
	}
	results, err := store.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: "order-1", Attempts: done})
	if err != nil {
		panic(err)
	}
	for i, r := range results {
		fmt.Printf("#%d %s\n", done[i].Head.Index, r.Outcome)
	}
	claimOne(ctx, store, clock, "order-1", "worker-1")
	// Output:
	// worker-1 claimed mailer #1, attempt 1
	// worker-1 claimed mailer #2, attempt 1
	// worker-1 claimed mailer #3, attempt 1
	// #1 completed
	// #2 completed
	// #3 completed
	// worker-1: settled
}

// A log consumer added after events were stored starts with WakeLog:
// Backfill makes it begin at the start of the session's lifetime, and it
// takes only the types it names.
func ExampleStore_WakeLog() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	_, err := store.Append(ctx, "order-1", []a2redis.Event{
		{ID: "placed", Type: "order.placed"}, {ID: "paid", Type: "order.paid"},
		{ID: "shipped", Type: "order.shipped"}, {ID: "refund", Type: "order.paid"},
	}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}

	auditor := a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid"}, Backfill: true}}
	woken, err := store.WakeLog(ctx, "order-1", auditor)
	if err != nil {
		panic(err)
	}
	fmt.Printf("auditor: position %d, head %d (session head %d)\n", woken.Cursor.Position, woken.Cursor.Head, woken.SessionHead)

	// The log cursor runs one head at a time, in order.
	for {
		claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{
			Session: "order-1", Holder: "worker-1", TTL: 30 * time.Second, Consumers: []a2redis.Consumer{auditor},
		})
		if err != nil {
			panic(err)
		}
		if claim.Outcome != redisstore.Claimed {
			fmt.Println("then:", claim.Outcome)
			break
		}
		head := claim.Heads[0]
		fmt.Printf("auditor handles #%d %s at %s\n", head.Index, head.Type, clock.at(head.CreatedAt))
		if _, err := store.CompleteAttempt(ctx, redisstore.CompleteRequest{
			Session: "order-1", Head: head.Ref(), Attempt: head.Attempts, Consumers: []a2redis.Consumer{auditor},
		}); err != nil {
			panic(err)
		}
	}
	// Output:
	// auditor: position 0, head 2 (session head 4)
	// auditor handles #2 order.paid at 03:04:05
	// auditor handles #4 order.paid at 03:04:05
	// then: settled
}

// A reducer caches its state as a snapshot; a reader replays only the
// events after it.
func ExampleStore_PutSnapshots() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, _, closeAll := exampleStore(ctx)
	defer closeAll()
	_, err := store.Append(ctx, "cart-1", []a2redis.Event{
		{ID: "1", Type: "item.added", Payload: json.RawMessage(`{"price":5}`)},
		{ID: "2", Type: "item.added", Payload: json.RawMessage(`{"price":7}`)},
	}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}
	// The reducer has applied events 1 and 2: a total of 12.
	if err := store.PutSnapshots(ctx, "cart-1", "total", []redisstore.SnapshotWrite{{Index: 2, State: json.RawMessage(`{"total":12}`)}}); err != nil {
		panic(err)
	}
	if _, err := store.Append(ctx, "cart-1", []a2redis.Event{{ID: "3", Type: "item.added", Payload: json.RawMessage(`{"price":1}`)}}, redisstore.AppendOptions{}); err != nil {
		panic(err)
	}

	// A reader: the snapshot, then the events after it.
	state, err := store.ReadState(ctx, "cart-1", "total", redisstore.ReadStateOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("snapshot %s at #%d, head #%d\n", state.Snapshot, state.SnapshotIndex, state.Head)
	var total struct{ Total int }
	if err := json.Unmarshal(state.Snapshot, &total); err != nil {
		panic(err)
	}
	events, err := store.Read(ctx, "cart-1", state.SnapshotIndex, state.Head)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		var item struct{ Price int }
		if err := json.Unmarshal(e.Payload, &item); err != nil {
			panic(err)
		}
		total.Total += item.Price
		fmt.Printf("replayed #%d\n", e.Index)
	}
	fmt.Println("total:", total.Total)
	// Output:
	// snapshot {"total":12} at #2, head #3
	// replayed #3
	// total: 13
}
