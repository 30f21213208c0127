// Package a2otel instruments a2redis with OpenTelemetry: spans and metrics
// for the store's appends, claims and settling calls (an
// redisstore.Observer), a worker middleware whose handler spans are linked
// to the spans of the appends that wrote their events, the outcomes of
// claimed heads, and gauges over the ready index. It uses the OpenTelemetry
// API only: the application installs the SDK and its exporters.
//
//	inst, err := a2otel.New(a2otel.Config{StoreTraceContext: true}) // the global providers
//	store, err := redisstore.New(ctx, client, redisstore.Config{Observer: inst})
//	reg, err := inst.ObserveReady(store)
//	w, err := worker.New(store, worker.Config{
//		Middleware: []worker.Middleware{inst.Middleware()},
//		Hooks:      worker.Hooks{OnOutcome: inst.OnOutcome},
//	}, handlers...)
//
// Spans follow the OpenTelemetry messaging conventions: messaging.system
// "a2redis", the operation types create (append, kind PRODUCER), receive
// (claims, CLIENT), process (a handler, CONSUMER) and settle (completions,
// failures and releases, CLIENT); the destination is the template
// "session/{id}" (messaging.destination.name and .template), never the
// session id itself, which spans carry as a2redis.session and metrics not
// at all. With Config.StoreTraceContext, a traced append stores its span's
// context (a W3C traceparent) with its events (a2redis.StoredEvent.Trace),
// and a handler's span is linked to it, not its child.
package a2otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/a2redis/a2redis/a2otel"

// System is the messaging.system attribute's value.
const System = "a2redis"

// DestinationTemplate is the destination of every span and metric: the
// session, as a template (session ids are unbounded).
const DestinationTemplate = "session/{id}"

// The attribute keys a2otel sets.
const (
	// KeySession is the session id (spans only).
	KeySession = attribute.Key("a2redis.session")
	// KeyLane is a head's lane (process spans; absent for event cursors).
	KeyLane = attribute.Key("a2redis.lane")
	// KeyIndex is a head's event index (process spans).
	KeyIndex = attribute.Key("a2redis.index")
	// KeyAttempt is a head's attempt number (process spans).
	KeyAttempt = attribute.Key("a2redis.attempt")
	// KeyCount is what a store operation did (redisstore.OperationEnd.Count).
	KeyCount = attribute.Key("a2redis.count")
	// KeyOutcome is a head's outcome (worker.OutcomeKind).
	KeyOutcome = attribute.Key("a2redis.outcome")
	// KeyShard is a ready-index shard (ready gauges).
	KeyShard = attribute.Key("a2redis.ready.shard")
	// KeyState is due or held (a2redis.ready.sessions).
	KeyState = attribute.Key("a2redis.ready.state")
	// KeyRetention is what a retention pass did with the sessions it
	// counts (a2redis.retention.sessions): scanned, ended, dropped,
	// changed (an append came between its look and its act) or skipped
	// (unreadable: their slot moving, their node down).
	KeyRetention = attribute.Key("a2redis.retention.result")
)

// The messaging convention's attribute keys.
const (
	keySystem        = attribute.Key("messaging.system")
	keyOpName        = attribute.Key("messaging.operation.name")
	keyOpType        = attribute.Key("messaging.operation.type")
	keyDestName      = attribute.Key("messaging.destination.name")
	keyDestTemplate  = attribute.Key("messaging.destination.template")
	keyConsumerGroup = attribute.Key("messaging.consumer.group.name")
	keyMessageID     = attribute.Key("messaging.message.id")
	keyBatchCount    = attribute.Key("messaging.batch.message_count")
	keyErrorType     = attribute.Key("error.type")
)

// Config configures the instrumentation. Zero values take the global
// providers.
type Config struct {
	// TracerProvider makes the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// StoreTraceContext stores the append span's context with the events
	// an append writes (a2redis.StoredEvent.Trace), so that handler spans
	// link to it. Off by default: a traced append takes the store's
	// general append script instead of its single-event and coalescing
	// fast paths (see docs/observability.md for the cost).
	StoreTraceContext bool
}

// Instrumentation is the OpenTelemetry instrumentation of a store and its
// workers. It is a redisstore.Observer (Config.Observer); Middleware and
// OnOutcome instrument a worker. Safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	meter  metric.Meter
	prop   propagation.TraceContext
	store  bool

	opDuration   metric.Float64Histogram
	sent         metric.Int64Counter
	consumed     metric.Int64Counter
	completed    metric.Int64Counter
	failed       metric.Int64Counter
	deadLettered metric.Int64Counter
	released     metric.Int64Counter

	processDuration metric.Float64Histogram
	claimToStart    metric.Float64Histogram
	appendToStart   metric.Float64Histogram
	inFlight        metric.Int64UpDownCounter
	outcomes        metric.Int64Counter

	retentionPasses   metric.Int64Counter
	retentionSessions metric.Int64Counter
	retentionSets     map[string]metric.MeasurementOption // by KeyRetention value
	system            metric.MeasurementOption            // messaging.system alone

	readySessions metric.Int64ObservableGauge
	readyAge      metric.Float64ObservableGauge
	paused        metric.Int64ObservableGauge
	deadHeads     metric.Int64ObservableGauge
	deadSessions  metric.Int64ObservableGauge
	deadAge       metric.Float64ObservableGauge

	ops    map[string]opAttrs       // per store operation name
	plain  metric.MeasurementOption // the store counters' attributes
	groups sync.Map                 // consumer name → *groupAttrs
}

// groupAttrs are a consumer group's fixed process attributes, built once.
type groupAttrs struct {
	span     []attribute.KeyValue
	set      metric.MeasurementOption
	inFlight metric.MeasurementOption
}

func (i *Instrumentation) group(consumer string) *groupAttrs {
	if g, ok := i.groups.Load(consumer); ok {
		return g.(*groupAttrs)
	}
	attrs := append(base("process", "process"), keyConsumerGroup.String(consumer))
	g := &groupAttrs{
		span:     attrs,
		set:      metric.WithAttributeSet(attribute.NewSet(attrs...)),
		inFlight: metric.WithAttributeSet(attribute.NewSet(keySystem.String(System), keyConsumerGroup.String(consumer))),
	}
	v, _ := i.groups.LoadOrStore(consumer, g)
	return v.(*groupAttrs)
}

// opAttrs are an operation's fixed attributes, built once.
type opAttrs struct {
	typ  string
	span []attribute.KeyValue     // base attributes
	set  metric.MeasurementOption // the same, as a metric attribute set
}

// New makes the instrumentation and its instruments.
func New(cfg Config) (*Instrumentation, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	i := &Instrumentation{tracer: tp.Tracer(ScopeName), meter: mp.Meter(ScopeName), store: cfg.StoreTraceContext}
	m := i.meter
	var errs []error
	hist := func(name, desc, unit string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return h
	}
	count := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{event}"))
		errs = append(errs, err)
		return c
	}
	i.opDuration = hist("messaging.client.operation.duration", "Duration of a store operation (append, claim, complete, fail, release).", "s")
	i.sent = count("messaging.client.sent.messages", "Events appended.")
	i.consumed = count("messaging.client.consumed.messages", "Heads claimed.")
	i.completed = count("a2redis.events.completed", "Heads completed.")
	i.failed = count("a2redis.events.failed", "Failures recorded (dead letters included).")
	i.deadLettered = count("a2redis.events.dead_lettered", "Heads dead-lettered.")
	i.released = count("a2redis.events.released", "Claims given back without a failure.")
	i.processDuration = hist("messaging.process.duration", "Duration of a handler.", "s")
	i.claimToStart = hist("a2redis.claim_to_start.duration", "From a head's claim to its handler's start.", "s")
	i.appendToStart = hist("a2redis.append_to_start.duration", "From an event's append to its handler's start.", "s")
	var err error
	i.inFlight, err = m.Int64UpDownCounter("a2redis.handlers.in_flight", metric.WithDescription("Handlers running."), metric.WithUnit("{handler}"))
	errs = append(errs, err)
	i.outcomes = count("a2redis.worker.outcomes", "Claimed heads by outcome (a2redis.outcome).")
	i.retentionPasses, err = m.Int64Counter("a2redis.retention.passes", metric.WithDescription("Retention passes this process ran (worker.Config.Retention)."), metric.WithUnit("{pass}"))
	errs = append(errs, err)
	i.retentionSessions, err = m.Int64Counter("a2redis.retention.sessions", metric.WithDescription("Sessions retention passes scanned, ended, dropped, found changed or skipped (a2redis.retention.result)."), metric.WithUnit("{session}"))
	errs = append(errs, err)
	i.retentionSets = map[string]metric.MeasurementOption{}
	i.system = metric.WithAttributeSet(attribute.NewSet(keySystem.String(System)))
	for _, result := range []string{"scanned", "ended", "dropped", "trimmed", "changed", "skipped"} {
		i.retentionSets[result] = metric.WithAttributeSet(attribute.NewSet(keySystem.String(System), KeyRetention.String(result)))
	}
	i.readySessions, err = m.Int64ObservableGauge("a2redis.ready.sessions", metric.WithDescription("Sessions the ready index lists, by shard and state (due: claimable now; held: once a claim or retry hold ends)."), metric.WithUnit("{session}"))
	errs = append(errs, err)
	i.readyAge, err = m.Float64ObservableGauge("a2redis.ready.oldest_age", metric.WithDescription("Age of the oldest due work per ready-index shard (0 when none)."), metric.WithUnit("s"))
	errs = append(errs, err)
	i.paused, err = m.Int64ObservableGauge("a2redis.consumer.paused", metric.WithDescription("1 while a registered consumer is paused on the prefix (redisstore.Store.PauseConsumer), else 0, per consumer group."), metric.WithUnit("1"))
	errs = append(errs, err)
	i.deadHeads, err = m.Int64ObservableGauge("a2redis.dead_letters", metric.WithDescription("Dead-lettered heads on the prefix (the dead index's total)."), metric.WithUnit("{head}"))
	errs = append(errs, err)
	i.deadSessions, err = m.Int64ObservableGauge("a2redis.dead_letters.sessions", metric.WithDescription("Sessions of the prefix that hold dead-lettered heads."), metric.WithUnit("{session}"))
	errs = append(errs, err)
	i.deadAge, err = m.Float64ObservableGauge("a2redis.dead_letters.oldest_age", metric.WithDescription("How long the session that has held dead letters longest has held them (0 when none)."), metric.WithUnit("s"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("a2otel: %w", err)
	}
	i.ops = map[string]opAttrs{}
	for _, name := range []string{redisstore.OpAppend, redisstore.OpClaim, redisstore.OpClaimNext, redisstore.OpComplete,
		redisstore.OpCompleteAndClaim, redisstore.OpFail, redisstore.OpRelease} {
		typ := opType(name)
		attrs := base(name, typ)
		i.ops[name] = opAttrs{typ: typ, span: attrs, set: metric.WithAttributeSet(attribute.NewSet(attrs...))}
	}
	i.plain = metric.WithAttributeSet(attribute.NewSet(keySystem.String(System), keyDestName.String(DestinationTemplate)))
	return i, nil
}

func (i *Instrumentation) opAttrs(name string) opAttrs {
	if a, ok := i.ops[name]; ok {
		return a
	}
	typ := opType(name)
	attrs := base(name, typ)
	return opAttrs{typ: typ, span: attrs, set: metric.WithAttributes(attrs...)}
}

// opType is the messaging operation type of a store operation.
func opType(name string) string {
	switch name {
	case redisstore.OpAppend:
		return "create"
	case redisstore.OpClaim, redisstore.OpClaimNext:
		return "receive"
	default:
		return "settle"
	}
}

func spanKind(typ string) trace.SpanKind {
	switch typ {
	case "create":
		return trace.SpanKindProducer
	case "process":
		return trace.SpanKindConsumer
	default:
		return trace.SpanKindClient
	}
}

// base are the attributes of every span and metric of an operation.
func base(name, typ string) []attribute.KeyValue {
	return []attribute.KeyValue{
		keySystem.String(System),
		keyOpName.String(name),
		keyOpType.String(typ),
		keyDestName.String(DestinationTemplate),
		keyDestTemplate.String(DestinationTemplate),
	}
}

// errorType is the error.type of an error: a short name of its a2redis
// (or context) sentinel, else "_OTHER".
func errorType(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{a2redis.ErrInvalidArgument, "invalid_argument"},
		{a2redis.ErrSupersededAttempt, "superseded_attempt"},
		{a2redis.ErrPartialDuplicateBatch, "partial_duplicate_batch"},
		{a2redis.ErrSessionCleared, "session_cleared"},
		{a2redis.ErrNoEvent, "no_event"},
		{a2redis.ErrUnavailable, "unavailable"},
		{a2redis.ErrNotReplicated, "not_replicated"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "_OTHER"
}

// Begin starts an operation's span (redisstore.Observer).
func (i *Instrumentation) Begin(ctx context.Context, op redisstore.Operation) (context.Context, func(redisstore.OperationEnd)) {
	oa := i.opAttrs(op.Name)
	start := time.Now()
	spanAttrs := make([]attribute.KeyValue, len(oa.span), len(oa.span)+2)
	copy(spanAttrs, oa.span)
	if op.Session != "" {
		spanAttrs = append(spanAttrs, KeySession.String(op.Session))
	}
	if op.Events > 0 {
		spanAttrs = append(spanAttrs, keyBatchCount.Int(op.Events))
	}
	ctx, span := i.tracer.Start(ctx, op.Name+" "+DestinationTemplate, trace.WithSpanKind(spanKind(oa.typ)), trace.WithAttributes(spanAttrs...))
	return ctx, func(e redisstore.OperationEnd) {
		d := time.Since(start).Seconds()
		if op.Session == "" && e.Session != "" {
			span.SetAttributes(KeySession.String(e.Session))
		}
		if span.IsRecording() {
			span.SetAttributes(KeyCount.Int(e.Count))
		}
		if e.Err != nil {
			et := errorType(e.Err)
			span.SetAttributes(keyErrorType.String(et))
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Err.Error())
			span.End()
			attrs := append(oa.span[:len(oa.span):len(oa.span)], keyErrorType.String(et))
			i.opDuration.Record(ctx, d, metric.WithAttributes(attrs...))
			return
		}
		span.End()
		i.opDuration.Record(ctx, d, oa.set)
		add := func(c metric.Int64Counter, n int) {
			if n > 0 {
				c.Add(ctx, int64(n), i.plain)
			}
		}
		switch op.Name {
		case redisstore.OpAppend:
			add(i.sent, e.Count)
		case redisstore.OpClaim, redisstore.OpClaimNext:
			add(i.consumed, e.Count)
		case redisstore.OpComplete:
			add(i.completed, e.Count)
		case redisstore.OpCompleteAndClaim:
			add(i.completed, e.Count)
			add(i.consumed, e.Claimed)
		case redisstore.OpFail:
			add(i.failed, e.Count)
		case redisstore.OpRelease:
			add(i.released, e.Count)
		}
		add(i.deadLettered, e.DeadLettered)
	}
}

// TraceContext is the W3C traceparent of the span in ctx, which Append
// stores with its events (redisstore.Observer); "" unless
// Config.StoreTraceContext is set and ctx has a valid span (not with a
// no-op provider and no incoming context).
func (i *Instrumentation) TraceContext(ctx context.Context) string {
	if !i.store || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	i.prop.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// Link is the link to the span of the append that wrote an event: the
// event's stored trace context; ok is false when it has none.
func (i *Instrumentation) Link(ev a2redis.StoredEvent) (trace.Link, bool) {
	if ev.Trace == "" {
		return trace.Link{}, false
	}
	sc := trace.SpanContextFromContext(i.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": ev.Trace}))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}

// Middleware wraps handlers with a process span (kind CONSUMER, linked to
// the append's span) and the handler metrics: messaging.process.duration,
// the claim-to-start and append-to-start latencies, and the handlers in
// flight.
func (i *Instrumentation) Middleware() worker.Middleware {
	return func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			start := time.Now()
			g := i.group(h.Consumer)
			set := g.set
			if !h.LastClaimedAt.IsZero() {
				i.claimToStart.Record(ctx, max(0, start.Sub(h.LastClaimedAt).Seconds()), set)
			}
			if !h.CreatedAt.IsZero() {
				i.appendToStart.Record(ctx, max(0, start.Sub(h.CreatedAt).Seconds()), set)
			}
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(g.span...),
				trace.WithAttributes(
					KeySession.String(h.Session), keyMessageID.String(h.ID),
					KeyIndex.Int64(h.Index), KeyAttempt.Int64(h.Attempts)),
			}
			if h.Lane != "" {
				opts = append(opts, trace.WithAttributes(KeyLane.String(h.Lane)))
			}
			if l, ok := i.Link(h.StoredEvent); ok {
				opts = append(opts, trace.WithLinks(l))
			}
			ctx, span := i.tracer.Start(ctx, "process "+DestinationTemplate, opts...)
			i.inFlight.Add(ctx, 1, g.inFlight)
			events, err := next(ctx, h)
			i.inFlight.Add(ctx, -1, g.inFlight)
			if err != nil {
				et := errorType(err)
				span.SetAttributes(keyErrorType.String(et))
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				set = metric.WithAttributes(append(g.span[:len(g.span):len(g.span)], keyErrorType.String(et))...)
			}
			span.End()
			i.processDuration.Record(ctx, time.Since(start).Seconds(), set)
			return events, err
		}
	}
}

// OnOutcome counts a head's outcome (a2redis.worker.outcomes, by consumer
// group and outcome): set it as worker.Hooks.OnOutcome.
func (i *Instrumentation) OnOutcome(ctx context.Context, o worker.Outcome) {
	i.outcomes.Add(ctx, 1, metric.WithAttributes(
		keySystem.String(System), keyConsumerGroup.String(o.Head.Consumer), KeyOutcome.String(string(o.Kind))))
}

// OnRetention counts a retention pass (a2redis.retention.passes) and the
// sessions it scanned, ended, dropped, trimmed, found changed and skipped
// (a2redis.retention.sessions, by a2redis.retention.result): set it as
// worker.Hooks.OnRetention. A pass that ends or drops nothing for hours
// while sessions pile up, or one that keeps skipping, shows here.
func (i *Instrumentation) OnRetention(ctx context.Context, r redisstore.RetentionResult) {
	i.retentionPasses.Add(ctx, 1, i.system)
	for result, n := range map[string]int{"scanned": r.Scanned, "ended": r.Ended, "dropped": r.Dropped, "trimmed": len(r.Trimmed), "changed": r.Changed, "skipped": r.Skipped} {
		// Zeros too: every series exists from the first pass on, so a
		// rate over it is defined.
		i.retentionSessions.Add(ctx, int64(n), i.retentionSets[result])
	}
}

// ObserveReady registers the ready-index gauges of a store: the sessions
// due and held and the age of the oldest due work, per shard, read with
// redisstore.Store.ReadyStats at each collection (a few commands per
// shard). Unregister the returned registration to stop.
func (i *Instrumentation) ObserveReady(store *redisstore.Store) (metric.Registration, error) {
	return i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		stats, err := store.ReadyStats(ctx)
		if err != nil {
			return err
		}
		now := store.Now()
		for _, s := range stats {
			shard := KeyShard.String(strconv.Itoa(s.Shard))
			sys := keySystem.String(System)
			o.ObserveInt64(i.readySessions, s.Due, metric.WithAttributes(sys, shard, KeyState.String("due")))
			o.ObserveInt64(i.readySessions, s.Held, metric.WithAttributes(sys, shard, KeyState.String("held")))
			age := 0.0
			if !s.Oldest.IsZero() {
				age = max(0, now.Sub(s.Oldest).Seconds())
			}
			o.ObserveFloat64(i.readyAge, age, metric.WithAttributes(sys, shard))
		}
		return nil
	}, i.readySessions, i.readyAge)
}

// ObserveConsumers registers the consumer gauges of a store:
// a2redis.consumer.paused (1 while paused, else 0) for every consumer of
// the prefix's registry, read with redisstore.Store.ReadConsumers at each
// collection (one GET). Unregister the returned registration to stop.
func (i *Instrumentation) ObserveConsumers(store *redisstore.Store) (metric.Registration, error) {
	return i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		list, _, err := store.ReadConsumers(ctx)
		if err != nil {
			return err
		}
		paused := store.Paused()
		for _, c := range list {
			v := int64(0)
			if slices.Contains(paused, c.Name) {
				v = 1
			}
			o.ObserveInt64(i.paused, v, metric.WithAttributes(keySystem.String(System), keyConsumerGroup.String(c.Name)))
		}
		return nil
	}, i.paused)
}

// ObserveDeadLetters registers the dead-letter gauges of a store's prefix:
// a2redis.dead_letters (heads), a2redis.dead_letters.sessions and
// a2redis.dead_letters.oldest_age, read with
// redisstore.Store.DeadSummaryOf at each collection (per ready shard, a
// ZRANGE and HSCAN pages over the sessions that hold dead letters: the
// cost grows with those sessions only). "Dead letters > 0" needs no scan
// of the keyspace. Unregister the returned registration to stop.
func (i *Instrumentation) ObserveDeadLetters(store *redisstore.Store) (metric.Registration, error) {
	return i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		sum, err := store.DeadSummaryOf(ctx)
		if err != nil {
			return err
		}
		attrs := metric.WithAttributes(keySystem.String(System))
		o.ObserveInt64(i.deadHeads, sum.DeadLetters, attrs)
		o.ObserveInt64(i.deadSessions, sum.Sessions, attrs)
		age := 0.0
		if !sum.Oldest.IsZero() {
			age = max(0, store.Now().Sub(sum.Oldest).Seconds())
		}
		o.ObserveFloat64(i.deadAge, age, attrs)
		return nil
	}, i.deadHeads, i.deadSessions, i.deadAge)
}

var _ redisstore.Observer = (*Instrumentation)(nil)
