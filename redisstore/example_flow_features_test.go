package redisstore_test

import (
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// Cancel skips a head that has not run: no claim hands it out again, it is
// not a dead letter, and its row records when it was cancelled.
func ExampleStore_Cancel() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	appendOrder(ctx, store, "order-1", "placed", a2redis.Target{Consumer: "mailer"})
	appendOrder(ctx, store, "order-1", "amended", a2redis.Target{Consumer: "mailer"})

	res, err := store.Cancel(ctx, redisstore.CancelRequest{Session: "order-1", Consumer: "mailer", Index: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println("cancel #1:", res.Outcome)

	// The next claim hands out #2 only.
	for _, h := range claimOne(ctx, store, clock, "order-1", "worker-1") {
		req := redisstore.CompleteAttemptsRequest{Session: "order-1", Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}}
		if _, err := store.CompleteAttempts(ctx, req); err != nil {
			panic(err)
		}
	}
	rec, err := store.HeadRecord(ctx, "order-1", a2redis.HeadRef{Consumer: "mailer", Index: 1})
	if err != nil {
		panic(err)
	}
	fmt.Printf("#1: done %v, cancelled %v at %s\n", rec.Done, rec.Cancelled(), clock.at(rec.CancelledAt))
	dead, err := store.DeadLetters(ctx, "order-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters:", len(dead))
	// Output:
	// cancel #1: cancelled
	// worker-1 claimed mailer #2, attempt 1
	// #1: done true, cancelled true at 03:04:05
	// dead letters: 0
}

// An event with NotBefore takes its index at once, and its heads wait until
// that time: a claim before it finds the session busy until then.
func ExampleStore_Append_scheduled() {
	ctx, cancel := exampleCtx()
	defer cancel()
	store, clock, closeAll := exampleStore(ctx)
	defer closeAll()
	res, err := store.Append(ctx, "order-1", []a2redis.Event{{
		ID: "reminder", Type: "order.reminder",
		Targets:   []a2redis.Target{{Consumer: "mailer"}},
		NotBefore: clock.now().Add(time.Hour),
	}}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("appended at index", res.Events[0].Index)

	claimOne(ctx, store, clock, "order-1", "worker-1") // before its time
	clock.advance(time.Hour)
	claimOne(ctx, store, clock, "order-1", "worker-1")
	// Output:
	// appended at index 1
	// worker-1: busy until 04:04:05
	// worker-1 claimed mailer #1, attempt 1
}
