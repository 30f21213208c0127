package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// TestHotSessionDoesNotStarveOthers: a backlog of 200 heads arrives in one
// session while the worker runs (its handlers all busy with it), then one
// event for each of 20 other sessions. Their wake-ups queue behind the hot
// session's; the test frees one slot at a time (a handler returns only when
// the test says) and records which session each started head belongs to.
// Round robin: every small session starts before the hot session has
// started more than 3 further event heads, or more than 16 lane or log
// heads per slot it holds (a lane's chain of heads, each claimed with its
// predecessor's completion, yields its slot after 16 while others wait) —
// counted, not timed. (Before, a claim that filled the worker's slots from
// a woken session put it back first in line, so the hot session took every
// freed slot until it drained; and a lane's chain never yielded.) For an
// event consumer, a lane consumer (the hot session's events over 50 lanes,
// so that it has as many heads runnable at once) and a typed log consumer.
func TestHotSessionDoesNotStarveOthers(t *testing.T) {
	for _, kind := range []string{"event", "lane", "log"} {
		t.Run(kind, func(t *testing.T) {
			each(t, everyone, func(t *testing.T, e *env) {
				hotSessionRounds(t, e, kind)
			})
		})
	}
}

func hotSessionRounds(t *testing.T, e *env, kind string) {
	const concurrency, hot, smalls = 4, 200, 20
	var (
		mu      sync.Mutex
		started []string // the session of each head a handler started, in order
	)
	gate := make(chan struct{})
	run := func(ctx context.Context, session string) error {
		mu.Lock()
		started = append(started, session)
		mu.Unlock()
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	event := func(i int) a2redis.Event {
		switch kind {
		case "event":
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: mailer.Name}}}
		case "lane":
			return a2redis.Event{Type: "t", Targets: []a2redis.Target{{Consumer: billing.Name, Lane: fmt.Sprint("l", i%50)}}}
		}
		return a2redis.Event{Type: "order.paid"} // the auditor's typed log
	}
	consumer := map[string]string{"event": mailer.Name, "lane": billing.Name, "log": auditor.Name}[kind]
	handler := worker.Handle(consumer, func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
		return nil, run(ctx, h.Session)
	})
	r := e.start(worker.Config{Concurrency: concurrency}, handler)
	t.Cleanup(func() { close(gate) })
	// The test hands the worker each session's wake-up itself, as its watch
	// would: pub/sub may drop one (Valkey 8.0.1's cluster bus drops a
	// PUBLISH to a node whose link is not yet two-way, valkey-io/valkey
	// #2817), which the worker covers with its index passes, but this test
	// counts the rotation of its queue. Every shard's work channel is
	// subscribed first, so that no subscription's gap sends the worker to
	// the index in the middle of the count.
	e.eventually("the worker's subscriptions", func() bool { return worker.SubscribedShards(r.w) == e.store.ReadyShards() })
	count := func(session string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range started {
			if s == session {
				n++
			}
		}
		return n
	}
	for i := 0; i < hot; i += 50 {
		batch := make([]a2redis.Event, 50)
		for j := range batch {
			batch[j] = event(i + j)
		}
		_, err := e.store.Append(e.ctx, "hot", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
	}
	worker.Wake(r.w, "hot")
	// A typed log runs one head at a time per session: the hot session
	// holds one slot, and the others stay free for the small ones.
	busy := concurrency
	if kind == "log" {
		busy = 1
	}
	e.eventually("the hot session's heads running", func() bool { return count("hot") == busy })
	var names []string
	for i := range smalls {
		names = append(names, fmt.Sprint("small-", i))
		e.clock.Advance(time.Millisecond)
		_, err := e.store.Append(e.ctx, names[i], []a2redis.Event{event(i)}, redisstore.AppendOptions{})
		require.NoError(t, err)
		worker.Wake(r.w, names[i])
	}
	if kind != "log" {
		require.Subset(t, worker.Woken(r.w), names, "every small session waits in the queue")
	}
	hotBefore := count("hot")
	startedSmall := func() int {
		n := 0
		for _, s := range names {
			n += min(count(s), 1)
		}
		return n
	}
	// One slot at a time: a handler returns, the worker claims again.
	for startedSmall() < smalls {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		require.Less(t, n, hot+smalls, "every head started, not every small session")
		// The store's clock moves on between claims, so the index lists a
		// session a claim left work in behind those waiting longer (its
		// rotation); with a clock that stands still, every session ties.
		e.clock.Advance(time.Millisecond)
		gate <- struct{}{}
		e.eventually("a head started in the freed slot", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(started) > n
		})
	}
	extra := count("hot") - hotBefore
	t.Logf("%s: the hot session started %d heads while 20 small sessions waited for their first", kind, extra)
	// An event consumer's turn is one claim: with one slot free at a time,
	// one head. The hot session's turn comes once in the queue's round,
	// and a claim from the index may find it earliest once before its
	// claims move it behind the others (claims alternate between the queue
	// and the index when the index may have work: the start-up repair's
	// word, say). Lane and log heads chain (a completion claims its lane's
	// next head in the slot it held) at most chainQuantum (16) heads a
	// turn of the session while others wait, whatever slots the turn
	// holds, then each of its slots goes back at its next completion.
	bound := 3
	if kind != "event" {
		bound = 16 + busy
	}
	require.LessOrEqual(t, extra, bound, "the hot session took the freed slots: %v", started)
}
