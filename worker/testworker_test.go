package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// The test binary doubles as a worker process for the subprocess tests:
// with envTestWorker set, TestMain runs testWorkerMain instead of the
// tests. The process runs a worker on TW_URL / TW_PREFIX until SIGTERM,
// records every handler run in Redis (fxRuns), prints "started" once
// running and, at exit, its outcome counts as JSON.
const envTestWorker = "A2REDIS_TESTWORKER"

// The consumers of the subprocess tests: an event consumer (which returns
// an event for odd indexes), a lane consumer, and a typed log consumer.
var processConsumers = []a2redis.Consumer{
	{Name: "ev"}, {Name: "ln"},
	{Name: "audit", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"t.audit"}}},
}

// fxRuns is the hash counting handler runs per head, fxRunsBy the same per
// process, fxOrder the list of a lane's runs in start order.
func fxRuns(prefix string) string       { return prefix + "-fx:runs" }
func fxRunsBy(prefix, id string) string { return prefix + "-fx:runs:" + id }
func fxOrder(prefix, session, lane string) string {
	return prefix + "-fx:order:" + session + "/" + lane
}

func testWorkerMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	client, err := redisstore.Dial(ctx, os.Getenv("TW_URL"))
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	prefix, id := os.Getenv("TW_PREFIX"), os.Getenv("TW_ID")
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: processConsumers})
	if err != nil {
		return fail(err)
	}
	ttl, _ := time.ParseDuration(os.Getenv("TW_TTL"))
	minDelay, _ := time.ParseDuration(os.Getenv("TW_DELAY_MIN"))
	maxDelay, _ := time.ParseDuration(os.Getenv("TW_DELAY_MAX"))
	concurrency, _ := strconv.Atoi(os.Getenv("TW_CONCURRENCY"))
	heartbeat, _ := time.ParseDuration(os.Getenv("TW_HEARTBEAT"))

	var mu sync.Mutex
	counts := map[worker.OutcomeKind]int{}
	handler := func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
		field := headName(h)
		cmds := rueidis.Commands{
			client.B().Hincrby().Key(fxRuns(prefix)).Field(field).Increment(1).Build(),
			client.B().Hincrby().Key(fxRunsBy(prefix, id)).Field(field).Increment(1).Build(),
		}
		if h.Kind == a2redis.LaneCursor {
			cmds = append(cmds, client.B().Rpush().Key(fxOrder(prefix, h.Session, h.Lane)).Element(strconv.FormatInt(h.Index, 10)).Build())
		}
		for _, r := range client.DoMulti(context.WithoutCancel(ctx), cmds...) {
			if err := r.Error(); err != nil {
				return nil, err
			}
		}
		if h.Type == "t.slow" {
			time.Sleep(2 * time.Second) // deaf to its context, like a stuck call
		} else {
			d := minDelay
			if maxDelay > minDelay {
				d += time.Duration(rand.Int64N(int64(maxDelay - minDelay)))
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if h.Consumer == "ev" && h.Index%2 == 1 {
			return []a2redis.Event{{Type: "ev.done", Payload: json.RawMessage(strconv.Quote(id))}}, nil
		}
		return nil, nil
	}
	w, err := worker.New(store, worker.Config{
		ID: id, TTL: ttl, Concurrency: concurrency, HeartbeatTTL: heartbeat,
		Hooks: worker.Hooks{
			OnStart: func(context.Context) { fmt.Println("started") },
			OnOutcome: func(_ context.Context, o worker.Outcome) {
				mu.Lock()
				counts[o.Kind]++
				mu.Unlock()
			},
		},
	}, worker.Handle("ev", handler), worker.Handle("ln", handler), worker.Handle("audit", handler))
	if err != nil {
		return fail(err)
	}
	if err := w.Run(ctx); err != nil {
		return fail(err)
	}
	mu.Lock()
	defer mu.Unlock()
	raw, _ := json.Marshal(counts)
	fmt.Println(string(raw))
	return 0
}
