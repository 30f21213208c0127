package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

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
