package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// asynqInFlight is how many goroutines enqueue.
const asynqInFlight = 64

func asynqScenarios(latencyEvents int) []*scenario {
	list := []*scenario{{
		id: "asynq/enqueue", system: SystemAsynq, kind: KindAppend,
		title:  fmt.Sprintf("asynq Client.Enqueue, %d goroutines, default options", asynqInFlight),
		events: 30_000, run: asynqEnqueue,
	}}
	for _, c := range []int{1, 16, 64} {
		events := 20_000
		if c == 1 {
			events = 5_000 // one task at a time
		}
		list = append(list, &scenario{
			id: fmt.Sprintf("asynq/process/concurrency=%d", c), system: SystemAsynq, kind: KindProcess,
			title:  fmt.Sprintf("asynq Server, Concurrency %d, default options otherwise, processing a backlog", c),
			events: events,
			run: func(ctx context.Context, h *harness, n int) (Measurement, error) {
				return asynqProcess(ctx, h, n, c)
			},
		})
	}
	list = append(list, &scenario{
		id: "asynq/latency", system: SystemAsynq, kind: KindLatency,
		title:  "asynq Enqueue → handler start, Server Concurrency 16, default options, fixed rate",
		events: latencyEvents, run: asynqLatency,
	})
	return list
}

// asynqQueue is the queue a scenario uses: asynq's "default" on a server of
// our own, a queue of this run's on a shared one (so cleanup finds it).
func (h *harness) asynqQueue() string {
	if h.own {
		return "default"
	}
	return h.name("q")
}

// asynqServer starts an asynq server with default options except
// Concurrency, the queue and the log level (warnings only: its info lines
// would interleave with the progress output).
func (h *harness) asynqServer(queue string, concurrency int, handler asynq.HandlerFunc) (*asynq.Server, error) {
	srv := asynq.NewServer(h.asynqOpt, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{queue: 1},
		LogLevel:    asynq.WarnLevel,
	})
	if err := srv.Start(handler); err != nil {
		return nil, fmt.Errorf("a2bench: asynq server: %w", err)
	}
	return srv, nil
}

func asynqFill(ctx context.Context, client *asynq.Client, queue string, n int, rec *recorder) (time.Duration, error) {
	return parallel(ctx, asynqInFlight, n, rec, func(ctx context.Context, i int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("order.placed", payload), asynq.Queue(queue))
		return err
	})
}

func asynqEnqueue(ctx context.Context, h *harness, n int) (Measurement, error) {
	client := asynq.NewClient(h.asynqOpt)
	defer client.Close()
	queue := h.asynqQueue()
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	rec := newRecorder(n)
	elapsed, err := asynqFill(ctx, client, queue, n, rec)
	if err != nil {
		return Measurement{}, err
	}
	return h.appended(ctx, ph, mem0, n, elapsed, rec, fmt.Sprintf("Enqueue call, %d in flight", asynqInFlight))
}

func asynqProcess(ctx context.Context, h *harness, n, concurrency int) (Measurement, error) {
	client := asynq.NewClient(h.asynqOpt)
	defer client.Close()
	queue := h.asynqQueue()
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	if _, err := asynqFill(ctx, client, queue, n, nil); err != nil {
		return Measurement{}, err
	}
	fill, err := ph.end(ctx, n)
	if err != nil {
		return Measurement{}, err
	}
	memFilled, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	if ph, err = h.begin(ctx); err != nil {
		return Measurement{}, err
	}
	var handled atomic.Int64
	start := time.Now()
	srv, err := h.asynqServer(queue, concurrency, func(context.Context, *asynq.Task) error {
		handled.Add(1)
		return nil
	})
	if err != nil {
		return Measurement{}, err
	}
	// Throughput counts handler returns; Shutdown then waits for the
	// workers to mark their last tasks done, which the phase's cost
	// includes (with the server's own shutdown writes).
	err = waitFor(ctx, 2*time.Minute, "asynq processing", func() bool { return handled.Load() >= int64(n) })
	elapsed := time.Since(start)
	srv.Shutdown()
	if err != nil {
		return Measurement{}, err
	}
	return h.processed(ctx, ph, fill, mem0, memFilled, n, elapsed)
}

func asynqLatency(ctx context.Context, h *harness, n int) (Measurement, error) {
	client := asynq.NewClient(h.asynqOpt)
	defer client.Close()
	queue := h.asynqQueue()
	clk := newClock()
	sent := make(stamps, n)
	rec := newRecorder(n)
	var handled atomic.Int64
	srv, err := h.asynqServer(queue, 16, func(_ context.Context, t *asynq.Task) error {
		now := clk.now()
		var body struct {
			Seq int `json:"seq"`
		}
		if err := json.Unmarshal(t.Payload(), &body); err == nil {
			if d, ok := sent.since(body.Seq, now); ok {
				rec.add(d)
			}
		}
		handled.Add(1)
		return nil
	})
	if err != nil {
		return Measurement{}, err
	}
	defer srv.Shutdown()
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	achieved, err := atRate(ctx, h.opts.Rate, n, func(ctx context.Context, i int) error {
		body := []byte(`{"seq":` + strconv.Itoa(i) + `,` + string(payload[1:]))
		sent[i].Store(max(clk.now(), 1))
		_, err := client.EnqueueContext(ctx, asynq.NewTask("order.placed", body), asynq.Queue(queue))
		return err
	})
	if err != nil {
		return Measurement{}, err
	}
	elapsed, cost, err := finishRated(ctx, ph, start, n, "asynq deliveries", func() bool { return handled.Load() >= int64(n) }, nil, nil, "")
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("Enqueue start → handler start"),
		Cost:    cost,
	}, nil
}
