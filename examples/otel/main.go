// Command otel runs an a2redis worker instrumented with OpenTelemetry
// (package a2otel) and serves its metrics for Prometheus on
// http://127.0.0.1:9464/metrics (A2OTEL_ADDR sets the address). A producer
// appends an order every 100 ms, each under a request span; the worker's
// mailer handles each order, and billing handles an account's orders in
// order, failing now and then (retried, after a while dead-lettered).
//
// It runs on an embedded miniredis unless A2REDIS_URL names a real server.
// It is a module of its own so that the library's importers never download
// the OpenTelemetry SDK or the Prometheus exporter.
//
//	go run .            # then: curl -s http://127.0.0.1:9464/metrics
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/a2otel"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	addr := os.Getenv("A2OTEL_ADDR")
	if addr == "" {
		addr = "127.0.0.1:9464"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// spanCounter counts the spans that end, as a stand-in for a trace
// exporter.
type spanCounter struct{ ended, linked atomic.Int64 }

func (c *spanCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *spanCounter) OnEnd(s sdktrace.ReadOnlySpan) {
	c.ended.Add(1)
	if len(s.Links()) > 0 {
		c.linked.Add(1)
	}
}
func (c *spanCounter) Shutdown(context.Context) error   { return nil }
func (c *spanCounter) ForceFlush(context.Context) error { return nil }

// run serves the metrics on ln and runs the producer and the worker until
// ctx ends.
func run(ctx context.Context, ln net.Listener) error {
	// The SDK: a Prometheus metric exporter and a tracer provider.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	spans := &spanCounter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	inst, err := a2otel.New(a2otel.Config{TracerProvider: tp, MeterProvider: mp, StoreTraceContext: true})
	if err != nil {
		return err
	}

	url := os.Getenv("A2REDIS_URL")
	if url == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		url = "redis://" + mr.Addr()
	}
	client, err := redisstore.Dial(ctx, url)
	if err != nil {
		return err
	}
	defer client.Close()
	consumers := []a2redis.Consumer{{Name: "mailer"}, {Name: "billing"}}
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: "a2otel-example", Consumers: consumers, Observer: inst})
	if err != nil {
		return err
	}
	reg, err := inst.ObserveReady(store)
	if err != nil {
		return err
	}
	defer reg.Unregister()
	deadReg, err := inst.ObserveDeadLetters(store)
	if err != nil {
		return err
	}
	defer deadReg.Unregister()

	srv := &http.Server{Handler: promhttp.HandlerFor(registry, promhttp.HandlerOpts{})}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()
	defer srv.Close()
	fmt.Printf("metrics on http://%s/metrics\n", ln.Addr())

	w, err := worker.New(store, worker.Config{
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		MaxFailures: 3,
		Middleware:  []worker.Middleware{inst.Middleware()},
		// Sessions idle for a day end (clear + reclaim); each pass is
		// counted by a2redis.retention.passes and .sessions.
		Retention: &redisstore.RetentionPolicy{IdleFor: 24 * time.Hour},
		Hooks:     worker.Hooks{OnOutcome: inst.OnOutcome, OnRetention: inst.OnRetention},
	},
		worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			return nil, nil
		}),
		worker.Handle("billing", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			if rand.IntN(4) == 0 {
				return nil, errors.New("card declined")
			}
			return nil, nil
		}, worker.WithBackoff(func(int64, error) time.Duration { return 200 * time.Millisecond })),
	)
	if err != nil {
		return err
	}
	go produce(ctx, tp, store)
	go func() {
		for range time.Tick(10 * time.Second) {
			fmt.Printf("spans ended: %d (linked to their append: %d)\n", spans.ended.Load(), spans.linked.Load())
		}
	}()
	return w.Run(ctx)
}

// produce appends an order every 100 ms, under a request span.
func produce(ctx context.Context, tp *sdktrace.TracerProvider, store *redisstore.Store) {
	tracer := tp.Tracer("example/producer")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, span := tracer.Start(ctx, "checkout")
		payload, _ := json.Marshal(map[string]int{"order": n})
		_, err := store.Append(rctx, fmt.Sprintf("customer-%d", n%7), []a2redis.Event{{
			Type: "order.placed", Payload: payload,
			Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "billing", Lane: "payments"}},
		}}, redisstore.AppendOptions{})
		span.End()
		if err != nil && ctx.Err() == nil {
			log.Print(err)
		}
	}
}
