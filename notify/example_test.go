package notify_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

// A feed delivers a session's events in order, exactly once: first what is
// stored (a catch-up read), then what wake-ups carry as it is appended.
func ExampleFeed_Follow() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "example"})
	if err != nil {
		panic(err)
	}
	if _, err := store.Append(ctx, "chat", []a2redis.Event{{ID: "m1", Type: "message", Payload: []byte(`{"text":"hi"}`)}}, redisstore.AppendOptions{}); err != nil {
		panic(err)
	}

	feed := notify.NewFeed(store, notify.FeedOptions{})
	done := errors.New("done")
	err = feed.Follow(ctx, "chat", 0, func(u notify.Update) error {
		for _, ev := range u.Events {
			fmt.Printf("#%d %s %s (caught up by reading: %v)\n", ev.Index, ev.ID, ev.Payload, u.CaughtUp)
			if ev.Index == 1 {
				// Appended while following: a wake-up carries it.
				go func() {
					_, _ = store.Append(ctx, "chat", []a2redis.Event{{ID: "m2", Type: "message", Payload: []byte(`{"text":"hello"}`)}}, redisstore.AppendOptions{})
				}()
			}
			if ev.Index == 2 {
				return done
			}
		}
		return nil
	})
	fmt.Println(errors.Is(err, done))
	// Output:
	// #1 m1 {"text":"hi"} (caught up by reading: true)
	// #2 m2 {"text":"hello"} (caught up by reading: false)
	// true
}

// A loop that only wants to be woken when a session gets new events (a
// claim loop, say) watches the session: the watch marks it followed, so
// appends publish their wake-ups, and reports each one.
func ExampleSessionWatcher_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "example"})
	if err != nil {
		panic(err)
	}

	watch := notify.NewSessionWatcher(store, notify.WatchOptions{})
	done := errors.New("done")
	err = watch.Watch(ctx, "orders", func(n notify.Notice) error {
		switch n.Kind {
		case notify.NoticeSubscribed, notify.NoticeOverflow:
			// Look at the session now: wake-ups may have been missed.
			fmt.Println("subscribed: read what is there")
			go func() {
				_, _ = store.Append(ctx, "orders", []a2redis.Event{{ID: "o1", Type: "order.placed"}}, redisstore.AppendOptions{})
			}()
		case notify.NoticeMessage:
			b, err := store.Bounds(ctx, "orders")
			if err != nil {
				return err
			}
			fmt.Printf("woken: the session's head is %d\n", b.Head)
			return done
		}
		return nil
	})
	fmt.Println(errors.Is(err, done))
	// Output:
	// subscribed: read what is there
	// woken: the session's head is 1
	// true
}
