package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// A worker with an event consumer and a lane consumer, stopped once it has
// handled what a producer appended.
func Example() {
	ctx := context.Background()
	mr, _ := miniredis.Run()
	defer mr.Close()
	client, _ := redisstore.Dial(ctx, "redis://"+mr.Addr())
	defer client.Close()
	store, _ := redisstore.New(ctx, client, redisstore.Config{Consumers: []a2redis.Consumer{{Name: "mailer"}, {Name: "billing"}}})

	_, _ = store.Append(ctx, "order-7", []a2redis.Event{
		{Type: "order.placed", Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: "acct-9"}}},
		{Type: "order.paid", Targets: []a2redis.Target{{Consumer: "billing", Lane: "acct-9"}}},
	}, redisstore.AppendOptions{})

	ctx, stop := context.WithCancel(ctx)
	billed := make(chan string, 2)
	w, err := worker.New(store, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			return []a2redis.Event{{Type: "email.sent"}}, nil // appended with the completion
		}),
		worker.Handle("billing", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			billed <- fmt.Sprintf("billing #%d %s", h.Index, h.Type) // the lane, in order
			return nil, nil
		}),
	)
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	fmt.Println(<-billed)
	fmt.Println(<-billed)
	stop() // a graceful stop: what was claimed is finished and completed
	fmt.Println("stopped:", <-done)
	events, _ := store.Read(context.Background(), "order-7", 0, 0)
	last := events[len(events)-1]
	fmt.Printf("#%d %s caused by %s #%d\n", last.Index, last.Type, last.Cause.Consumer, last.Cause.Index)
	// Output:
	// billing #1 order.placed
	// billing #2 order.paid
	// stopped: <nil>
	// #3 email.sent caused by mailer #1
}

// A consumer registered with PerSession 1 runs one head of a session at a
// time, whatever the worker's Concurrency, while other sessions run beside
// it: per-session serial processing without lanes.
func Example_perSession() {
	ctx := context.Background()
	mr, _ := miniredis.Run()
	defer mr.Close()
	client, _ := redisstore.Dial(ctx, "redis://"+mr.Addr())
	defer client.Close()
	store, _ := redisstore.New(ctx, client, redisstore.Config{Consumers: []a2redis.Consumer{{Name: "sync", PerSession: 1}}})
	for _, doc := range []string{"doc-1", "doc-2"} {
		_, _ = store.Append(ctx, doc, []a2redis.Event{
			{Type: "edit", Targets: []a2redis.Target{{Consumer: "sync"}}},
			{Type: "edit", Targets: []a2redis.Target{{Consumer: "sync"}}},
			{Type: "edit", Targets: []a2redis.Target{{Consumer: "sync"}}},
		}, redisstore.AppendOptions{})
	}

	ctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	running, overlaps, handled := map[string]int{}, 0, 0
	all := make(chan struct{})
	w, _ := worker.New(store, worker.Config{Concurrency: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		worker.Handle("sync", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			mu.Lock()
			if running[h.Session]++; running[h.Session] > 1 {
				overlaps++
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			running[h.Session]--
			if handled++; handled == 6 {
				close(all)
			}
			mu.Unlock()
			return nil, nil
		}),
	)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-all
	stop()
	fmt.Println("stopped:", <-done)
	fmt.Println("handled:", handled, "overlapping runs of one session:", overlaps)
	// Output:
	// stopped: <nil>
	// handled: 6 overlapping runs of one session: 0
}

// A rate limit bounds a consumer's handler starts across every worker of
// the prefix: here 2 a day, so of three events two run and the third waits,
// unclaimed and with no failure counted, for the next window.
func Example_rateLimit() {
	ctx := context.Background()
	mr, _ := miniredis.Run()
	defer mr.Close()
	client, _ := redisstore.Dial(ctx, "redis://"+mr.Addr())
	defer client.Close()
	store, _ := redisstore.New(ctx, client, redisstore.Config{Consumers: []a2redis.Consumer{{Name: "mailer"}}})
	_, _ = store.Append(ctx, "order-1", []a2redis.Event{
		{Type: "mail", Targets: []a2redis.Target{{Consumer: "mailer"}}},
		{Type: "mail", Targets: []a2redis.Target{{Consumer: "mailer"}}},
		{Type: "mail", Targets: []a2redis.Target{{Consumer: "mailer"}}},
	}, redisstore.AppendOptions{})

	ctx, stop := context.WithCancel(ctx)
	var handled atomic.Int64
	w, _ := worker.New(store, worker.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			handled.Add(1)
			return nil, nil
		}, worker.RateLimit(2, 24*time.Hour)),
	)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for handled.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the third head stays unclaimed
	stop()
	fmt.Println("stopped:", <-done)
	cursors, _ := store.Cursors(context.Background(), "order-1")
	for _, c := range cursors {
		fmt.Printf("handled %d; %s waits at #%d with %d failures\n", handled.Load(), c.Consumer, c.Head, c.Failures)
	}
	// Output:
	// stopped: <nil>
	// handled 2; mailer waits at #3 with 0 failures
}
