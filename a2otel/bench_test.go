package a2otel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/a2otel"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// discard is a span processor that drops every span (the SDK's recording
// cost without an exporter's).
type discard struct{}

func (discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discard) Shutdown(context.Context) error                  { return nil }
func (discard) ForceFlush(context.Context) error                { return nil }

// modes: no observer, a2otel on no-op providers, a2otel on the SDK
// (every span sampled and recorded, metrics aggregated by a manual reader),
// and the same storing the trace context with the events.
func modes(b *testing.B) []struct {
	name string
	inst *a2otel.Instrumentation
} {
	noopInst, err := a2otel.New(a2otel.Config{TracerProvider: noop.NewTracerProvider(), MeterProvider: noopmetric.NewMeterProvider()})
	require.NoError(b, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discard{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	sdkInst, err := a2otel.New(a2otel.Config{TracerProvider: tp, MeterProvider: mp})
	require.NoError(b, err)
	linkInst, err := a2otel.New(a2otel.Config{TracerProvider: tp, MeterProvider: mp, StoreTraceContext: true})
	require.NoError(b, err)
	return []struct {
		name string
		inst *a2otel.Instrumentation
	}{{"off", nil}, {"noop", noopInst}, {"sdk", sdkInst}, {"sdk+trace-context", linkInst}}
}

func benchStore(b *testing.B, inst *a2otel.Instrumentation, consumers []a2redis.Consumer) *redisstore.Store {
	cfg := redisstore.Config{Prefix: redistest.Prefix(b), Consumers: consumers}
	if inst != nil {
		cfg.Observer = inst
	}
	store, err := redisstore.New(context.Background(), redistest.Server(b), cfg)
	require.NoError(b, err)
	return store
}

var payload = json.RawMessage(`{"order":1,"note":"a small payload"}`)

// BenchmarkAppend: one-event appends from 64 goroutines to one session.
func BenchmarkAppend(b *testing.B) {
	for _, m := range modes(b) {
		b.Run(m.name, func(b *testing.B) {
			store := benchStore(b, m.inst, nil)
			ctx := context.Background()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := store.Append(ctx, "s", []a2redis.Event{{Type: "t", Payload: payload}}, redisstore.AppendOptions{}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkProcess: a worker (Concurrency 64) handles b.N events of one
// event consumer, spread over 64 sessions, appended before the timer.
func BenchmarkProcess(b *testing.B) {
	consumers := []a2redis.Consumer{{Name: "c"}}
	for _, m := range modes(b) {
		b.Run(m.name, func(b *testing.B) {
			store := benchStore(b, m.inst, consumers)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			for start := 0; start < b.N; start += 100 {
				events := make([]a2redis.Event, 0, 100)
				for range min(100, b.N-start) {
					events = append(events, a2redis.Event{Type: "t", Payload: payload, Targets: []a2redis.Target{{Consumer: "c"}}})
				}
				_, err := store.Append(ctx, fmt.Sprintf("s%d", (start/100)%64), events, redisstore.AppendOptions{})
				require.NoError(b, err)
			}
			var handled atomic.Int64
			all := make(chan struct{})
			cfg := worker.Config{Concurrency: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			count := func(context.Context, worker.Outcome) {
				if handled.Add(1) == int64(b.N) {
					close(all)
				}
			}
			cfg.Hooks.OnOutcome = count
			if m.inst != nil {
				cfg.Middleware = []worker.Middleware{m.inst.Middleware()}
				cfg.Hooks.OnOutcome = func(ctx context.Context, o worker.Outcome) { m.inst.OnOutcome(ctx, o); count(ctx, o) }
			}
			w, err := worker.New(store, cfg, worker.Handle("c", func(context.Context, a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }))
			require.NoError(b, err)
			wctx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			b.ResetTimer()
			go func() { ran <- w.Run(wctx) }()
			select {
			case <-all:
			case <-ctx.Done():
				b.Fatal("timed out")
			}
			b.StopTimer()
			stop()
			require.NoError(b, <-ran)
		})
	}
}
