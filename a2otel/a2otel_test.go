package a2otel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/a2otel"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// side is one process's OpenTelemetry: an in-memory span exporter and a
// manual metric reader.
type side struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	inst   *a2otel.Instrumentation
}

func newSide(t *testing.T, store bool) *side {
	s := &side{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { _ = s.tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	inst, err := a2otel.New(a2otel.Config{TracerProvider: s.tp, MeterProvider: mp, StoreTraceContext: store})
	require.NoError(t, err)
	s.inst = inst
	return s
}

func (s *side) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range s.spans.GetSpans() {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

func attrs(sp tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func (s *side) metrics(t *testing.T) map[string]metricdata.Metrics {
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum adds a counter's (or up-down counter's) points whose attributes
// include want.
func sum(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	data, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a sum", m.Name)
	var n int64
	for _, p := range data.DataPoints {
		if has(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

func histCount(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) uint64 {
	data, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a histogram", m.Name)
	var n uint64
	for _, p := range data.DataPoints {
		if has(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

var consumers = []a2redis.Consumer{{Name: "mailer"}, {Name: "billing"}}

// A producer appends under a request span; a worker — another store, with
// its own providers — handles the events. The append span is a PRODUCER
// child of the request; each handler span is a CONSUMER span linked to the
// append span (not its child); claims are receive and completions and
// failures settle spans (CLIENT); the counters, histograms and ready
// gauges count what happened.
func TestSpansLinksAndMetrics(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := tg.Client(t)
			prefix := redistest.Prefix(t)
			producer, consumer := newSide(t, true), newSide(t, false)
			pstore, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: consumers, Observer: producer.inst})
			require.NoError(t, err)
			wstore, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: consumers, Observer: consumer.inst})
			require.NoError(t, err)
			reg, err := producer.inst.ObserveReady(pstore)
			require.NoError(t, err)
			defer func() { _ = reg.Unregister() }()

			reqCtx, req := producer.tp.Tracer("test").Start(ctx, "request")
			res, err := pstore.Append(reqCtx, "order-1", []a2redis.Event{
				{ID: "placed", Type: "order.placed", Payload: json.RawMessage(`1`), Targets: []a2redis.Target{{Consumer: "mailer"}}},
				{ID: "charge", Type: "order.charge", Payload: json.RawMessage(`2`), Targets: []a2redis.Target{{Consumer: "billing", Lane: "acct"}}},
			}, redisstore.AppendOptions{})
			require.NoError(t, err)
			req.End()
			require.Len(t, res.Events, 2)

			// The ready gauges see the session due.
			ready := producer.metrics(t)["a2redis.ready.sessions"]
			gauge, ok := ready.Data.(metricdata.Gauge[int64])
			require.True(t, ok)
			var due int64
			for _, p := range gauge.DataPoints {
				if has(p.Attributes, []attribute.KeyValue{a2otel.KeyState.String("due")}) {
					due += p.Value
				}
			}
			assert.Equal(t, int64(1), due)
			_, ok = producer.metrics(t)["a2redis.ready.oldest_age"].Data.(metricdata.Gauge[float64])
			assert.True(t, ok)

			var mu sync.Mutex
			handled := map[string]trace.SpanContext{}
			done := make(chan struct{})
			record := func(ctx context.Context, h a2redis.HeadEvent) {
				mu.Lock()
				defer mu.Unlock()
				handled[h.Consumer] = trace.SpanContextFromContext(ctx)
				if len(handled) == 2 {
					close(done)
				}
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			w, err := worker.New(wstore, worker.Config{
				Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
				Middleware: []worker.Middleware{consumer.inst.Middleware()},
				Hooks:      worker.Hooks{OnOutcome: consumer.inst.OnOutcome},
			},
				worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
					record(ctx, h)
					return nil, nil
				}),
				worker.Handle("billing", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
					record(ctx, h)
					return nil, worker.Permanent(errors.New("card declined"))
				}),
			)
			require.NoError(t, err)
			ran := make(chan error, 1)
			go func() { ran <- w.Run(wctx) }()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("the handlers did not run")
			}
			// Wait for both outcomes to be recorded, then stop.
			require.Eventually(t, func() bool {
				m := consumer.metrics(t)["a2redis.worker.outcomes"]
				return m.Data != nil && sum(t, m) == 2
			}, 30*time.Second, 10*time.Millisecond)
			stop()
			require.NoError(t, <-ran)

			// The producer: the request and its append span.
			appends := producer.named("append session/{id}")
			require.Len(t, appends, 1)
			ap := appends[0]
			assert.Equal(t, trace.SpanKindProducer, ap.SpanKind)
			assert.Equal(t, req.SpanContext().SpanID(), ap.Parent.SpanID())
			a := attrs(ap)
			assert.Equal(t, "a2redis", a["messaging.system"].AsString())
			assert.Equal(t, "append", a["messaging.operation.name"].AsString())
			assert.Equal(t, "create", a["messaging.operation.type"].AsString())
			assert.Equal(t, "session/{id}", a["messaging.destination.name"].AsString())
			assert.Equal(t, "session/{id}", a["messaging.destination.template"].AsString())
			assert.Equal(t, int64(2), a["messaging.batch.message_count"].AsInt64())
			assert.Equal(t, "order-1", a[a2otel.KeySession].AsString())
			// The events carry the append span's context.
			tc := ap.SpanContext
			for _, ev := range res.Events {
				l, ok := producer.inst.Link(ev)
				require.True(t, ok)
				assert.True(t, l.SpanContext.Equal(tc.WithRemote(true)) || (l.SpanContext.TraceID() == tc.TraceID() && l.SpanContext.SpanID() == tc.SpanID()))
			}

			// The worker: a process span per handler, linked to the append.
			procs := consumer.named("process session/{id}")
			require.Len(t, procs, 2)
			groups := map[string]tracetest.SpanStub{}
			for _, p := range procs {
				assert.Equal(t, trace.SpanKindConsumer, p.SpanKind)
				require.Len(t, p.Links, 1)
				assert.Equal(t, tc.TraceID(), p.Links[0].SpanContext.TraceID())
				assert.Equal(t, tc.SpanID(), p.Links[0].SpanContext.SpanID())
				assert.NotEqual(t, tc.SpanID(), p.Parent.SpanID(), "linked, not a child")
				pa := attrs(p)
				assert.Equal(t, "process", pa["messaging.operation.type"].AsString())
				assert.Equal(t, "a2redis", pa["messaging.system"].AsString())
				assert.Equal(t, "session/{id}", pa["messaging.destination.template"].AsString())
				assert.Equal(t, "order-1", pa[a2otel.KeySession].AsString())
				groups[pa["messaging.consumer.group.name"].AsString()] = p
			}
			require.Contains(t, groups, "mailer")
			require.Contains(t, groups, "billing")
			assert.Equal(t, "placed", attrs(groups["mailer"])["messaging.message.id"].AsString())
			assert.Equal(t, "acct", attrs(groups["billing"])[a2otel.KeyLane].AsString())
			assert.Equal(t, "_OTHER", attrs(groups["billing"])["error.type"].AsString())
			// The handler ran inside its span.
			mu.Lock()
			assert.Equal(t, groups["mailer"].SpanContext.SpanID(), handled["mailer"].SpanID())
			mu.Unlock()

			// Claims are receive spans, completions and the failure settle.
			kinds := map[string]string{}
			for _, sp := range consumer.spans.GetSpans() {
				kinds[attrs(sp)["messaging.operation.name"].AsString()] = attrs(sp)["messaging.operation.type"].AsString()
				switch attrs(sp)["messaging.operation.type"].AsString() {
				case "receive", "settle":
					assert.Equal(t, trace.SpanKindClient, sp.SpanKind, sp.Name)
				}
			}
			assert.Equal(t, "receive", kinds["claim_next"])
			assert.Equal(t, "settle", kinds["fail"])
			assert.True(t, kinds["complete"] == "settle" || kinds["complete_and_claim"] == "settle", "a completion span: %v", kinds)

			// Metrics.
			pm := producer.metrics(t)
			assert.Equal(t, int64(2), sum(t, pm["messaging.client.sent.messages"]))
			assert.Equal(t, uint64(1), histCount(t, pm["messaging.client.operation.duration"], attribute.String("messaging.operation.name", "append")))
			cm := consumer.metrics(t)
			assert.Equal(t, int64(2), sum(t, cm["messaging.client.consumed.messages"]))
			assert.Equal(t, int64(1), sum(t, cm["a2redis.events.completed"]))
			assert.Equal(t, int64(1), sum(t, cm["a2redis.events.failed"]))
			assert.Equal(t, int64(1), sum(t, cm["a2redis.events.dead_lettered"]))
			assert.Equal(t, int64(0), sum(t, cm["a2redis.handlers.in_flight"]))
			for _, g := range []string{"mailer", "billing"} {
				group := attribute.String("messaging.consumer.group.name", g)
				assert.Equal(t, uint64(1), histCount(t, cm["messaging.process.duration"], group), g)
				assert.Equal(t, uint64(1), histCount(t, cm["a2redis.claim_to_start.duration"], group), g)
				assert.Equal(t, uint64(1), histCount(t, cm["a2redis.append_to_start.duration"], group), g)
			}
			assert.Equal(t, int64(1), sum(t, cm["a2redis.worker.outcomes"], attribute.String("a2redis.outcome", "completed")))
			assert.Equal(t, int64(1), sum(t, cm["a2redis.worker.outcomes"], attribute.String("a2redis.outcome", "dead_lettered")))
		})
	}
}

// Nothing is stored with the events with a no-op tracer, or with the SDK
// unless StoreTraceContext is set (the append span is still recorded).
func TestUntracedAppendStoresNoContext(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			noopInst, err := a2otel.New(a2otel.Config{TracerProvider: noop.NewTracerProvider(), StoreTraceContext: true})
			require.NoError(t, err)
			sdk := newSide(t, false)
			for _, inst := range []*a2otel.Instrumentation{noopInst, sdk.inst} {
				store, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t), Observer: inst})
				require.NoError(t, err)
				res, err := store.Append(ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
				require.NoError(t, err)
				assert.Empty(t, res.Events[0].Trace)
				got, err := store.Read(ctx, "s", 0, 0)
				require.NoError(t, err)
				assert.Empty(t, got[0].Trace)
			}
			assert.Len(t, sdk.named("append session/{id}"), 1)
		})
	}
}

// TestPausedGauge: a2redis.consumer.paused is 1 for a paused consumer and
// 0 for the others, per consumer group.
func TestPausedGauge(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client := tg.Client(t)
			side := newSide(t, true)
			store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: redistest.Prefix(t), Consumers: consumers})
			require.NoError(t, err)
			reg, err := side.inst.ObserveConsumers(store)
			require.NoError(t, err)
			defer func() { _ = reg.Unregister() }()
			require.NoError(t, store.PauseConsumer(ctx, "mailer"))
			gauge, ok := side.metrics(t)["a2redis.consumer.paused"].Data.(metricdata.Gauge[int64])
			require.True(t, ok)
			values := map[string]int64{}
			for _, p := range gauge.DataPoints {
				group, _ := p.Attributes.Value("messaging.consumer.group.name")
				values[group.AsString()] = p.Value
			}
			want := map[string]int64{}
			for _, c := range consumers {
				want[c.Name] = 0
			}
			want["mailer"] = 1
			assert.Equal(t, want, values)
		})
	}
}

// TestDeadLetterGauges: the dead-letter gauges follow the dead index: 0
// with none, then the heads and sessions dead-lettered, with their age.
func TestDeadLetterGauges(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			side := newSide(t, true)
			store, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t), Consumers: consumers})
			require.NoError(t, err)
			reg, err := side.inst.ObserveDeadLetters(store)
			require.NoError(t, err)
			defer func() { _ = reg.Unregister() }()
			read := func() (heads, sessions int64, age float64) {
				m := side.metrics(t)
				h, ok := m["a2redis.dead_letters"].Data.(metricdata.Gauge[int64])
				require.True(t, ok)
				s, ok := m["a2redis.dead_letters.sessions"].Data.(metricdata.Gauge[int64])
				require.True(t, ok)
				a, ok := m["a2redis.dead_letters.oldest_age"].Data.(metricdata.Gauge[float64])
				require.True(t, ok)
				return h.DataPoints[0].Value, s.DataPoints[0].Value, a.DataPoints[0].Value
			}
			heads, sessions, age := read()
			assert.Equal(t, [3]float64{0, 0, 0}, [3]float64{float64(heads), float64(sessions), age})

			for _, session := range []string{"a", "b"} {
				_, err := store.Append(ctx, session, []a2redis.Event{
					{Type: "t", Targets: []a2redis.Target{{Consumer: "mailer"}}},
					{Type: "t", Targets: []a2redis.Target{{Consumer: "mailer"}}},
				}, redisstore.AppendOptions{})
				require.NoError(t, err)
				claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "w", TTL: time.Minute})
				require.NoError(t, err)
				for _, h := range claim.Heads {
					res, err := store.FailAttempt(ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: "boom", Permanent: true})
					require.NoError(t, err)
					require.Equal(t, redisstore.DeadLettered, res.Outcome)
				}
			}
			heads, sessions, age = read()
			assert.Equal(t, int64(4), heads)
			assert.Equal(t, int64(2), sessions)
			assert.GreaterOrEqual(t, age, 0.0)
		})
	}
}

// TestRetentionMetrics: OnRetention counts a real retention pass — one
// pass, the sessions it scanned and the idle ones it ended — and a pass
// that finds nothing idle counts a pass and no ended session.
func TestRetentionMetrics(t *testing.T) {
	for _, tg := range redistest.Targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			side := newSide(t, true)
			clock := redistest.NewClock(time.UnixMilli(1_800_000_000_000))
			store, err := redisstore.New(ctx, tg.Client(t), redisstore.Config{Prefix: redistest.Prefix(t), Consumers: consumers, Clock: clock.Now})
			require.NoError(t, err)
			for _, session := range []string{"a", "b"} {
				_, err := store.Append(ctx, session, []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			policy := redisstore.RetentionPolicy{IdleFor: time.Hour, MaxScan: 1 << 30, ScanPage: 20_000}
			pass := func() redisstore.RetentionResult {
				r, err := store.Retention(ctx, policy, "")
				require.NoError(t, err)
				side.inst.OnRetention(ctx, r)
				return r
			}
			quiet := pass()
			require.Zero(t, quiet.Ended)
			clock.Advance(2 * time.Hour)
			r := pass()
			require.Equal(t, 2, r.Ended)
			m := side.metrics(t)
			assert.Equal(t, int64(2), sum(t, m["a2redis.retention.passes"]))
			sessions := m["a2redis.retention.sessions"]
			assert.Equal(t, int64(2), sum(t, sessions, a2otel.KeyRetention.String("ended")))
			assert.Equal(t, int64(quiet.Scanned+r.Scanned), sum(t, sessions, a2otel.KeyRetention.String("scanned")))
			assert.GreaterOrEqual(t, quiet.Scanned+r.Scanned, 4, "each pass scanned both sessions")
			assert.Zero(t, sum(t, sessions, a2otel.KeyRetention.String("dropped")))
		})
	}
}
