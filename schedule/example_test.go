package schedule_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

// Two processes run the same schedule (here two runners on one embedded
// server, moved by one test clock): each tick is appended once, whichever
// process gets there first; the other's append replays it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := redisstore.Dial(ctx, "redis://"+mr.Addr())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	clock := newTestClock(time.Date(2031, 3, 1, 11, 59, 30, 0, time.UTC))
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "example", Clock: clock.Now})
	if err != nil {
		panic(err)
	}

	report := schedule.Schedule{
		Name: "report", Every: time.Minute, Session: "reports",
		Event: a2redis.Event{Type: "report.due", Targets: []a2redis.Target{{Consumer: "reporter"}}},
	}
	var mu sync.Mutex
	appended, replayed := 0, 0
	onTick := func(name string, tick time.Time, res redisstore.AppendResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			panic(err)
		case res.Replayed:
			replayed++
		default:
			appended++
		}
	}
	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, id := range []string{"process-a", "process-b"} {
		r, err := schedule.NewRunner(store, schedule.Config{Clock: clock, ID: id, OnTick: onTick}, report)
		if err != nil {
			panic(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(run) }()
	}
	// Three minutes pass; both runners wake for each tick.
	for range 3 {
		for clock.pending() < 2 {
			time.Sleep(time.Millisecond)
		}
		clock.Advance(time.Minute)
	}
	for clock.pending() < 2 {
		time.Sleep(time.Millisecond)
	}
	stop()
	wg.Wait()

	events, err := store.Read(ctx, "reports", 0, 100)
	if err != nil {
		panic(err)
	}
	for _, ev := range events {
		fmt.Println(ev.Index, ev.ID)
	}
	fmt.Printf("appended %d, replayed %d\n", appended, replayed)
	// Output:
	// 1 a2s:report:1930132800000
	// 2 a2s:report:1930132860000
	// 3 a2s:report:1930132920000
	// appended 3, replayed 3
}
