package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Parameters of the raw-Streams scenarios.
const (
	streamInFlight  = 64  // XADDs in flight
	streamConsumers = 16  // consumer-group readers
	streamCount     = 100 // XREADGROUP COUNT
)

func streamScenarios(latencyEvents int) []*scenario {
	return []*scenario{
		{
			id: "streams/xadd", system: SystemStream, kind: KindAppend,
			title:  fmt.Sprintf("Raw XADD through rueidis, %d in flight, 1 stream", streamInFlight),
			events: 100_000, run: streamXadd,
		},
		{
			id: "streams/group", system: SystemStream, kind: KindProcess,
			title:  fmt.Sprintf("Raw consumer group: %d readers, XREADGROUP COUNT %d + XACK, 1 stream", streamConsumers, streamCount),
			events: 100_000, run: streamGroup,
		},
		{
			id: "streams/latency", system: SystemStream, kind: KindLatency,
			title:  "Raw XADD → XREADGROUP BLOCK delivery (+ XACK), fixed rate",
			events: latencyEvents, run: streamLatency,
		},
	}
}

func xadd(c rueidis.Client, key string, fields ...string) rueidis.Completed {
	cmd := c.B().Xadd().Key(key).Id("*").FieldValue()
	for i := 0; i+1 < len(fields); i += 2 {
		cmd = cmd.FieldValue(fields[i], fields[i+1])
	}
	return cmd.Build()
}

func streamXadd(ctx context.Context, h *harness, n int) (Measurement, error) {
	c, key := h.client, h.name("raw")
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	rec := newRecorder(n)
	elapsed, err := parallel(ctx, streamInFlight, n, rec, func(ctx context.Context, i int) error {
		return c.Do(ctx, xadd(c, key, "payload", string(payload))).Error()
	})
	if err != nil {
		return Measurement{}, err
	}
	return h.appended(ctx, ph, mem0, n, elapsed, rec, fmt.Sprintf("XADD call, %d in flight", streamInFlight))
}

func streamGroup(ctx context.Context, h *harness, n int) (Measurement, error) {
	c, key := h.client, h.name("raw")
	if err := c.Do(ctx, c.B().XgroupCreate().Key(key).Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		return Measurement{}, fmt.Errorf("a2bench: XGROUP CREATE: %w", err)
	}
	mem0, err := h.usedMemory(ctx)
	if err != nil {
		return Measurement{}, err
	}
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	if _, err := parallel(ctx, streamInFlight, n, nil, func(ctx context.Context, i int) error {
		return c.Do(ctx, xadd(c, key, "payload", string(payload))).Error()
	}); err != nil {
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
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range streamConsumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consumer := "c" + strconv.Itoa(w)
			for gctx.Err() == nil {
				res, err := c.Do(gctx, c.B().Xreadgroup().Group("g", consumer).Count(streamCount).Streams().Key(key).Id(">").Build()).AsXRead()
				if rueidis.IsRedisNil(err) {
					return
				}
				if err != nil {
					cancel(fmt.Errorf("a2bench: XREADGROUP: %w", err))
					return
				}
				entries := res[key]
				if len(entries) == 0 {
					return
				}
				ids := make([]string, len(entries))
				for i, e := range entries {
					ids[i] = e.ID
				}
				if err := c.Do(gctx, c.B().Xack().Key(key).Group("g").Id(ids...).Build()).Error(); err != nil {
					cancel(fmt.Errorf("a2bench: XACK: %w", err))
					return
				}
				handled.Add(int64(len(entries)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(gctx); err != nil {
		return Measurement{}, err
	}
	if handled.Load() != int64(n) {
		return Measurement{}, fmt.Errorf("%w: %d of %d", errShort, handled.Load(), n)
	}
	return h.processed(ctx, ph, fill, mem0, memFilled, n, elapsed)
}

func streamLatency(ctx context.Context, h *harness, n int) (Measurement, error) {
	c, key := h.client, h.name("raw")
	if err := c.Do(ctx, c.B().XgroupCreate().Key(key).Group("g").Id("$").Mkstream().Build()).Error(); err != nil {
		return Measurement{}, fmt.Errorf("a2bench: XGROUP CREATE: %w", err)
	}
	clk := newClock()
	sent := make(stamps, n)
	rec := newRecorder(n)
	var acked atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	readerDone := make(chan error, 1)
	go func() {
		readerDone <- func() error {
			for rctx.Err() == nil {
				res, err := c.Do(rctx, c.B().Xreadgroup().Group("g", "c").Count(streamCount).Block(1000).Streams().Key(key).Id(">").Build()).AsXRead()
				if rueidis.IsRedisNil(err) {
					continue
				}
				if err != nil {
					return err
				}
				now := clk.now()
				entries := res[key]
				ids := make([]string, len(entries))
				for i, e := range entries {
					ids[i] = e.ID
					if seq, err := strconv.Atoi(e.FieldValues["seq"]); err == nil {
						if d, ok := sent.since(seq, now); ok {
							rec.add(d)
						}
					}
				}
				if len(ids) == 0 {
					continue
				}
				if err := c.Do(rctx, c.B().Xack().Key(key).Group("g").Id(ids...).Build()).Error(); err != nil {
					return err
				}
				acked.Add(int64(len(ids)))
			}
			return nil
		}()
	}()
	// Let the first blocking read reach the server.
	time.Sleep(50 * time.Millisecond)
	ph, err := h.begin(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	achieved, err := atRate(ctx, h.opts.Rate, n, func(ctx context.Context, i int) error {
		sent[i].Store(max(clk.now(), 1))
		return c.Do(ctx, xadd(c, key, "seq", strconv.Itoa(i), "payload", string(payload))).Error()
	})
	if err != nil {
		return Measurement{}, err
	}
	elapsed, cost, err := finishRated(ctx, ph, start, n, "stream deliveries", func() bool { return acked.Load() >= int64(n) }, stop, readerDone, "XREADGROUP reader")
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{
		Events: n, Seconds: elapsed.Seconds(), Throughput: achieved,
		Latency: rec.latency("XADD start → XREADGROUP BLOCK reply"),
		Cost:    cost,
	}, nil
}
