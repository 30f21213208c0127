package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// exampleClock is the examples' store clock: fixed, moved by hand.
type exampleClock struct{ ms atomic.Int64 }

func (c *exampleClock) now() time.Time          { return time.UnixMilli(c.ms.Load()).UTC() }
func (c *exampleClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *exampleClock) at(t time.Time) string   { return t.UTC().Format(time.TimeOnly) }

// exampleStore opens a store on a fresh embedded miniredis, with a clock of
// its own and numbered ids so that the examples' output is deterministic. A
// real deployment dials its server and leaves Clock and IDs unset.
func exampleStore(ctx context.Context) (store *redisstore.Store, clock *exampleClock, closeAll func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err := redisstore.Dial(ctx, "redis://"+mr.Addr())
	if err != nil {
		panic(err)
	}
	clock = &exampleClock{}
	clock.ms.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	var n atomic.Int64
	store, err = redisstore.New(ctx, client, redisstore.Config{
		Prefix: "example",
		Clock:  clock.now,
		IDs:    func() string { return "generated-" + strconv.FormatInt(n.Add(1), 10) },
	})
	if err != nil {
		panic(err)
	}
	return store, clock, func() { client.Close(); mr.Close() }
}

// Dial connects with the options the store needs on every kind of server:
// the same line works on miniredis, Redis, Valkey, Upstash (rediss://) and
// a Redis Cluster seed.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mr, err := miniredis.Run() // stands in for redis://127.0.0.1:6379
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	client, err := redisstore.Dial(ctx, "redis://"+mr.Addr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "myapp"})
	if err != nil {
		panic(err)
	}
	fmt.Println(client.Mode(), store.Prefix())
	// Output:
	// standalone myapp
}

func ExampleStore_Append() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, _, closeAll := exampleStore(ctx)
	defer closeAll()

	batch := []a2redis.Event{
		{ID: "placed", Type: "order.placed", Payload: json.RawMessage(`{"total":42}`)},
		// Targets make consumers handle the event: an event cursor for
		// mailer, and a place in billing's "payments" lane.
		{ID: "paid", Type: "order.paid", Payload: json.RawMessage(`{"amount":42}`), Targets: []a2redis.Target{
			{Consumer: "mailer"}, {Consumer: "billing", Lane: "payments"},
		}},
		{Type: "order.note"}, // no id: the store generates one; no payload: null
	}
	res, err := store.Append(ctx, "order-1", batch, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}
	for _, e := range res.Events {
		fmt.Printf("#%d %s %s %s at %s\n", e.Index, e.ID, e.Type, e.Payload, e.CreatedAt.UTC().Format(time.RFC3339))
	}
	fmt.Println("pending work:", res.HasPending)

	// Appending the same ids again (a retry after a lost reply) writes
	// nothing and returns the stored rows.
	again, err := store.Append(ctx, "order-1", batch[:2], redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed:", again.Replayed, "indexes:", again.Events[0].Index, again.Events[1].Index)

	events, err := store.Read(ctx, "order-1", 1, 0) // after index 1, through the head
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		fmt.Printf("read #%d %s\n", e.Index, e.Type)
	}
	// Output:
	// #1 placed order.placed {"total":42} at 2030-01-02T03:04:05Z
	// #2 paid order.paid {"amount":42} at 2030-01-02T03:04:05Z
	// #3 generated-1 order.note null at 2030-01-02T03:04:05Z
	// pending work: true
	// replayed: true indexes: 1 2
	// read #2 order.paid
	// read #3 order.note
}

func ExampleStore_ClaimAvailable() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, _, closeAll := exampleStore(ctx)
	defer closeAll()

	_, err := store.Append(ctx, "order-1", []a2redis.Event{
		{ID: "placed", Type: "order.placed", Targets: []a2redis.Target{{Consumer: "mailer"}}},
	}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}

	// A worker claims the runnable heads of the consumers it serves, for a
	// lease. Each claim returns the head's event and its attempt number.
	claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{
		Session:   "order-1",
		Holder:    "worker-1",
		TTL:       30 * time.Second,
		Consumers: []a2redis.Consumer{{Name: "mailer"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("outcome:", claim.Outcome)
	head := claim.Heads[0]
	fmt.Printf("%s has #%d %s, attempt %d, until %s\n", head.Consumer, head.Index, head.Type, head.Attempts,
		head.ClaimExpiresAt.UTC().Format(time.TimeOnly))

	// Completing the attempt moves the cursor past the head and appends
	// what the handler returned, caused by this attempt, in one step.
	done, err := store.CompleteAttempt(ctx, redisstore.CompleteRequest{
		Session: "order-1",
		Head:    head.Ref(),
		Attempt: head.Attempts,
		Events:  []a2redis.Event{{ID: "mailed", Type: "email.sent"}},
	})
	if err != nil {
		panic(err)
	}
	followUp := done.Events[0]
	fmt.Printf("%s: #%d %s caused by %s #%d attempt %d\n", done.Outcome, followUp.Index, followUp.Type,
		followUp.Cause.Consumer, followUp.Cause.Index, followUp.Cause.Attempt)

	// Nothing is left to claim.
	again, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "order-1", Holder: "worker-1", TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("then:", again.Outcome)
	// Output:
	// outcome: claimed
	// mailer has #1 order.placed, attempt 1, until 03:04:35
	// completed: #2 email.sent caused by mailer #1 attempt 1
	// then: settled
}

func ExampleStore_Clear() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, _, closeAll := exampleStore(ctx)
	defer closeAll()

	_, err := store.Append(ctx, "chat-7", []a2redis.Event{
		{ID: "m1", Type: "message"}, {ID: "m2", Type: "message"}, {ID: "m3", Type: "message"},
	}, redisstore.AppendOptions{})
	if err != nil {
		panic(err)
	}

	// Clear appends a marker: the events below it are a past lifetime.
	cleared, err := store.Clear(ctx, "chat-7", redisstore.ClearOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("cleared: %v, marker at #%d\n", cleared.Cleared, cleared.ClearIndex)

	// Reads start at the marker, and the old ids are free again.
	if _, err := store.Append(ctx, "chat-7", []a2redis.Event{{ID: "m1", Type: "message"}}, redisstore.AppendOptions{}); err != nil {
		panic(err)
	}
	printLog := func() {
		events, err := store.Read(ctx, "chat-7", 0, 0)
		if err != nil {
			panic(err)
		}
		for _, e := range events {
			fmt.Printf("  #%d %s %s\n", e.Index, e.ID, e.Type)
		}
	}
	printLog()

	// Reclaim deletes the past lifetime's entries; indexes stay as they are.
	reclaimed, err := store.Reclaim(ctx, "chat-7")
	if err != nil {
		panic(err)
	}
	fmt.Printf("reclaimed %d entries, done: %v\n", reclaimed.Deleted, reclaimed.Done)
	printLog()
	// Output:
	// cleared: true, marker at #4
	//   #4 generated-1 a2.clear
	//   #5 m1 message
	// reclaimed 3 entries, done: true
	//   #4 generated-1 a2.clear
	//   #5 m1 message
}
