package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/conformance/internal/model"
	"github.com/a2redis/a2redis/redisstore"
)

// api is what the differential test drives: the Redis store and the model
// both have these methods.
type api interface {
	Append(ctx context.Context, session string, events []a2redis.Event, opts redisstore.AppendOptions) (redisstore.AppendResult, error)
	Read(ctx context.Context, session string, after, through int64) ([]a2redis.StoredEvent, error)
	ReadTail(ctx context.Context, session string, limit int) ([]a2redis.StoredEvent, error)
	Bounds(ctx context.Context, session string) (redisstore.Bounds, error)
	ClaimAvailable(ctx context.Context, req redisstore.ClaimRequest) (redisstore.ClaimResult, error)
	RenewClaims(ctx context.Context, req redisstore.RenewRequest) (redisstore.RenewResult, error)
	CompleteAttempt(ctx context.Context, req redisstore.CompleteRequest) (redisstore.CompleteResult, error)
	CompleteAttempts(ctx context.Context, req redisstore.CompleteAttemptsRequest) ([]redisstore.CompleteResult, error)
	CompleteAndClaim(ctx context.Context, req redisstore.CompleteAttemptsRequest, next redisstore.NextClaim) (redisstore.CompleteAndClaimResult, error)
	FailAttempt(ctx context.Context, req redisstore.FailRequest) (redisstore.FailResult, error)
	DeadLetters(ctx context.Context, session string) ([]a2redis.HeadEvent, error)
	Redrive(ctx context.Context, req redisstore.RedriveRequest) (redisstore.RedriveResult, error)
	Cancel(ctx context.Context, req redisstore.CancelRequest) (redisstore.CancelResult, error)
	WakeLog(ctx context.Context, session string, consumer a2redis.Consumer) (redisstore.WakeLogResult, error)
	Cursors(ctx context.Context, session string) ([]a2redis.Cursor, error)
	Clear(ctx context.Context, session string, opts redisstore.ClearOptions) (redisstore.ClearResult, error)
	ReclaimPage(ctx context.Context, session string) (redisstore.ReclaimResult, error)
	Reclaim(ctx context.Context, session string) (redisstore.ReclaimResult, error)
	Drop(ctx context.Context, session string) (redisstore.DropResult, error)
	Trim(ctx context.Context, session string, req redisstore.TrimRequest) (redisstore.TrimResult, error)
	Retention(ctx context.Context, policy redisstore.RetentionPolicy, cursor string) (redisstore.RetentionResult, error)
	PutSnapshots(ctx context.Context, session, reducer string, writes []redisstore.SnapshotWrite) error
	ReadState(ctx context.Context, session, reducer string, opts redisstore.ReadStateOptions) (redisstore.State, error)
	PresenceSet(ctx context.Context, session string, w redisstore.PresenceWrite) ([]string, error)
	PresenceRead(ctx context.Context, session string) ([]redisstore.PresenceEntry, error)
	PresencePrune(ctx context.Context, session string, fields []redisstore.PresenceField) (int, error)
	Release(ctx context.Context, req redisstore.ReleaseRequest) ([]redisstore.ReleaseOutcome, error)
	ReadyAt(ctx context.Context, session string) (redisstore.ReadyState, error)
	DeadAt(ctx context.Context, session string) (redisstore.DeadSession, bool, error)
	InFlight(ctx context.Context, session string) (map[string]int64, error)
	ReadConsumers(ctx context.Context) ([]a2redis.Consumer, int64, error)
	AddConsumers(ctx context.Context, consumers ...a2redis.Consumer) error
	RemoveConsumers(ctx context.Context, names ...string) error
	PauseConsumer(ctx context.Context, name string) error
	ResumeConsumer(ctx context.Context, name string) error
	Paused() []string
}

var (
	_ api = (*redisstore.Store)(nil)
	_ api = (*model.Store)(nil)
)

// The operation kinds of the differential test.
const (
	opAppend        = "append"
	opClaim         = "claim"
	opRenew         = "renew"
	opComplete      = "complete"
	opCompleteMany  = "complete-many"
	opCompleteClaim = "complete-and-claim" // Many, then Next
	opFail          = "fail"
	opRedrive       = "redrive"
	opCancel        = "cancel"
	opWakeLog       = "wake"
	opClear         = "clear"
	opReclaimPage   = "reclaim-page"
	opReclaim       = "reclaim"
	opDrop          = "drop"
	opTrim          = "trim"
	opRetention     = "retention"
	opPutSnapshots  = "put-snapshots"
	opReadState     = "read-state"
	opRead          = "read"
	opReadTail      = "read-tail"
	opBounds        = "bounds"
	opCursors       = "cursors"
	opDeadLetters   = "dead-letters"
	opPresenceSet   = "presence-set"
	opPresenceRead  = "presence-read"
	opPresencePrune = "presence-prune"
	opRelease       = "release"
	opReady         = "ready"
	opAdvance       = "advance" // moves the shared clock; runs on neither side
	// The consumer registry's operations; each replies with the registry
	// as it reads after it (registryView).
	opConsumersAdd    = "consumers-add"
	opConsumersRemove = "consumers-remove"
	opConsumerPause   = "consumer-pause"
	opConsumerResume  = "consumer-resume"
	opConsumersRead   = "consumers-read"
)

// registryView is the consumer registry as one side reads it: its
// consumers, version and paused names.
type registryView struct {
	Consumers []a2redis.Consumer
	Version   int64
	Paused    []string
}

// readRegistry reads one side's registry.
func readRegistry(ctx context.Context, s api) (registryView, error) {
	cs, v, err := s.ReadConsumers(ctx)
	if err != nil {
		return registryView{}, err
	}
	return registryView{Consumers: cs, Version: v, Paused: s.Paused()}, nil
}

// op is one operation with concrete arguments, so a sequence can be
// replayed, and shrunk, without the results that produced it.
type op struct {
	Kind     string
	Session  string
	Events   []a2redis.Event
	Append   redisstore.AppendOptions
	Claim    redisstore.ClaimRequest
	Renew    redisstore.RenewRequest
	Complete redisstore.CompleteRequest
	Many     redisstore.CompleteAttemptsRequest
	Next     redisstore.NextClaim
	Fail     redisstore.FailRequest
	Release  redisstore.ReleaseRequest
	Redrive  redisstore.RedriveRequest
	Cancel   redisstore.CancelRequest
	Consumer a2redis.Consumer
	ClearOpt redisstore.ClearOptions
	// Retention is a retention pass's policy (opRetention).
	Retention redisstore.RetentionPolicy
	// Trim is a trim's request (opTrim).
	Trim     redisstore.TrimRequest
	Reducer  string
	Snaps    []redisstore.SnapshotWrite
	After    int64
	Through  int64
	Limit    int
	Presence redisstore.PresenceWrite
	Fields   []redisstore.PresenceField
	Advance  time.Duration
	// Trace is the trace context an append runs with (see traceContext).
	Trace string
	// Registry and Names are a registry operation's consumers and names.
	Registry []a2redis.Consumer
	Names    []string
}

// traceKey carries an op's trace context in its context.
type traceKey struct{}

// traceContext is the trace context of an op's context: both sides store
// it with an append's events (redisstore.Config.Observer, model.Config.Trace).
func traceContext(ctx context.Context) string {
	tc, _ := ctx.Value(traceKey{}).(string)
	return tc
}

// traceObserver is the differential store's Observer: it observes nothing
// and supplies the op's trace context.
type traceObserver struct{}

func (traceObserver) Begin(ctx context.Context, _ redisstore.Operation) (context.Context, func(redisstore.OperationEnd)) {
	return ctx, func(redisstore.OperationEnd) {}
}

func (traceObserver) TraceContext(ctx context.Context) string { return traceContext(ctx) }

// run runs the operation on one side.
func (o op) run(ctx context.Context, s api) (any, error) {
	switch o.Kind {
	case opAppend:
		if o.Trace != "" {
			ctx = context.WithValue(ctx, traceKey{}, o.Trace)
		}
		return s.Append(ctx, o.Session, o.Events, o.Append)
	case opClaim:
		return s.ClaimAvailable(ctx, o.Claim)
	case opRenew:
		return s.RenewClaims(ctx, o.Renew)
	case opComplete:
		return s.CompleteAttempt(ctx, o.Complete)
	case opCompleteMany:
		return s.CompleteAttempts(ctx, o.Many)
	case opCompleteClaim:
		return s.CompleteAndClaim(ctx, o.Many, o.Next)
	case opFail:
		return s.FailAttempt(ctx, o.Fail)
	case opRedrive:
		return s.Redrive(ctx, o.Redrive)
	case opCancel:
		return s.Cancel(ctx, o.Cancel)
	case opWakeLog:
		return s.WakeLog(ctx, o.Session, o.Consumer)
	case opClear:
		return s.Clear(ctx, o.Session, o.ClearOpt)
	case opReclaimPage:
		return s.ReclaimPage(ctx, o.Session)
	case opReclaim:
		return s.Reclaim(ctx, o.Session)
	case opDrop:
		return s.Drop(ctx, o.Session)
	case opTrim:
		return s.Trim(ctx, o.Session, o.Trim)
	case opRetention:
		return s.Retention(ctx, o.Retention, "")
	case opPutSnapshots:
		return nil, s.PutSnapshots(ctx, o.Session, o.Reducer, o.Snaps)
	case opReadState:
		return s.ReadState(ctx, o.Session, o.Reducer, redisstore.ReadStateOptions{Through: o.Through})
	case opRead:
		return s.Read(ctx, o.Session, o.After, o.Through)
	case opReadTail:
		return s.ReadTail(ctx, o.Session, o.Limit)
	case opBounds:
		return s.Bounds(ctx, o.Session)
	case opCursors:
		return s.Cursors(ctx, o.Session)
	case opDeadLetters:
		return s.DeadLetters(ctx, o.Session)
	case opPresenceSet:
		return s.PresenceSet(ctx, o.Session, o.Presence)
	case opPresenceRead:
		return s.PresenceRead(ctx, o.Session)
	case opPresencePrune:
		return s.PresencePrune(ctx, o.Session, o.Fields)
	case opRelease:
		return s.Release(ctx, o.Release)
	case opConsumersAdd, opConsumersRemove, opConsumerPause, opConsumerResume, opConsumersRead:
		var err error
		switch o.Kind {
		case opConsumersAdd:
			err = s.AddConsumers(ctx, o.Registry...)
		case opConsumersRemove:
			err = s.RemoveConsumers(ctx, o.Names...)
		case opConsumerPause:
			err = s.PauseConsumer(ctx, o.Names[0])
		case opConsumerResume:
			err = s.ResumeConsumer(ctx, o.Names[0])
		}
		if err != nil {
			return nil, err
		}
		return readRegistry(ctx, s)
	case opReady:
		r, err := s.ReadyAt(ctx, o.Session)
		if r.Due {
			r.At = time.Time{} // when it got work: the store's to keep, not the contract's
		}
		return r, err
	}
	return nil, fmt.Errorf("conformance: unknown op %q", o.Kind)
}

// errorClass names an error by the contract's sentinel it matches; errors
// outside the contract keep their text (and never compare equal to a
// model's, which has none).
func errorClass(err error) string {
	if err == nil {
		return ""
	}
	var sup *a2redis.SupersededError
	switch {
	case errors.As(err, &sup):
		return fmt.Sprintf("superseded %s attempt %d", refOf(sup.Cause.Ref()), sup.Cause.Attempt)
	case errors.Is(err, a2redis.ErrSupersededAttempt):
		return "superseded"
	case errors.Is(err, a2redis.ErrInvalidArgument):
		return "invalid argument"
	case errors.Is(err, a2redis.ErrPartialDuplicateBatch):
		return "partial duplicate"
	case errors.Is(err, a2redis.ErrSessionCleared):
		return "session cleared"
	case errors.Is(err, a2redis.ErrNoEvent):
		return "no event"
	case errors.Is(err, a2redis.ErrRangeGap):
		return "range gap: " + err.Error()
	case errors.Is(err, a2redis.ErrTrimmed):
		return "trimmed: " + err.Error()
	case errors.Is(err, a2redis.ErrLayoutMismatch):
		return "layout mismatch"
	case errors.Is(err, a2redis.ErrConsumerMismatch):
		return "consumer mismatch"
	}
	return "error: " + err.Error()
}

// String renders the operation on one line, for reports.
func (o op) String() string {
	var b strings.Builder
	b.WriteString(o.Kind)
	if o.Session != "" {
		b.WriteString(" " + o.Session)
	}
	switch o.Kind {
	case opAppend:
		b.WriteString(" " + eventsString(o.Events))
		if o.Append.OriginIndex > 0 {
			fmt.Fprintf(&b, " origin=%d", o.Append.OriginIndex)
		}
		b.WriteString(servedString(o.Append.Consumers))
		if o.Trace != "" {
			b.WriteString(" trace=" + o.Trace)
		}
	case opClaim:
		c := o.Claim
		fmt.Fprintf(&b, "%s holder=%s ttl=%v", sessionOf(c.Session), c.Holder, c.TTL)
		if !c.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, " expires=%d", c.ExpiresAt.UnixMilli())
		}
		if c.Through > 0 {
			fmt.Fprintf(&b, " through=%d", c.Through)
		}
		if len(c.Exclude) > 0 {
			fmt.Fprintf(&b, " exclude=%s", refsString(c.Exclude))
		}
		if c.MaxFailures > 0 {
			fmt.Fprintf(&b, " max-failures=%d", c.MaxFailures)
		}
		if c.Limit > 0 {
			fmt.Fprintf(&b, " limit=%d", c.Limit)
		}
		b.WriteString(servedString(c.Consumers))
	case opRenew:
		r := o.Renew
		fmt.Fprintf(&b, "%s holder=%s ttl=%v claims=[", sessionOf(r.Session), r.Holder, r.TTL)
		for i, c := range r.Claims {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s#%d", refOf(c.Head), c.Attempt)
		}
		b.WriteByte(']')
	case opComplete:
		c := o.Complete
		fmt.Fprintf(&b, "%s %s#%d %s%s", sessionOf(c.Session), refOf(c.Head), c.Attempt, eventsString(c.Events), servedString(c.Consumers))
	case opCompleteMany, opCompleteClaim:
		c := o.Many
		fmt.Fprintf(&b, "%s [", sessionOf(c.Session))
		for i, a := range c.Attempts {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s#%d", refOf(a.Head), a.Attempt)
		}
		fmt.Fprintf(&b, "]%s", servedString(c.Consumers))
		if o.Kind == opCompleteClaim {
			fmt.Fprintf(&b, " next=%s ttl=%v", o.Next.Holder, o.Next.TTL)
		}
	case opRelease:
		r := o.Release
		fmt.Fprintf(&b, "%s delay=%v [", sessionOf(r.Session), r.Delay)
		for i, a := range r.Attempts {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s#%d", refOf(a.Head), a.Attempt)
		}
		b.WriteByte(']')
	case opFail:
		f := o.Fail
		fmt.Fprintf(&b, "%s %s#%d max=%d retry-after=%v err=%q", sessionOf(f.Session), refOf(f.Head), f.Attempt, f.MaxFailures, f.RetryAfter, f.Error)
	case opRedrive:
		r := o.Redrive
		fmt.Fprintf(&b, "%s %s %s%s", sessionOf(r.Session), refOf(a2redis.HeadRef{Consumer: r.Consumer, Lane: r.Lane, Index: r.Index}), r.Action, servedString(r.Consumers))
	case opCancel:
		r := o.Cancel
		fmt.Fprintf(&b, "%s %s%s", sessionOf(r.Session), refOf(a2redis.HeadRef{Consumer: r.Consumer, Lane: r.Lane, Index: r.Index}), servedString(r.Consumers))
	case opWakeLog:
		b.WriteString(servedString([]a2redis.Consumer{o.Consumer}))
	case opClear:
		if o.ClearOpt.IfLastIndex != nil {
			fmt.Fprintf(&b, " if-last=%d", *o.ClearOpt.IfLastIndex)
		}
		if c := o.ClearOpt.Cause; c != nil {
			fmt.Fprintf(&b, " cause=%s#%d", refOf(c.Ref()), c.Attempt)
		}
	case opPutSnapshots:
		fmt.Fprintf(&b, " %s", o.Reducer)
		for _, w := range o.Snaps {
			fmt.Fprintf(&b, " %d=%s", w.Index, w.State)
			if len(w.Pins) > 0 {
				fmt.Fprintf(&b, " pins=%s", refsString(w.Pins))
			}
		}
	case opTrim:
		fmt.Fprintf(&b, " through=%d keep-last=%d older-than=%v dry-run=%v", o.Trim.Through, o.Trim.KeepLast, o.Trim.OlderThan, o.Trim.DryRun)
	case opRetention:
		fmt.Fprintf(&b, " idle-for=%v drop=%v dry-run=%v max=%d", o.Retention.IdleFor, o.Retention.Drop, o.Retention.DryRun, o.Retention.MaxSessions)
		if t := o.Retention.Trim; t != nil {
			fmt.Fprintf(&b, " trim(keep-last=%d older-than=%v)", t.KeepLast, t.OlderThan)
		}
	case opReadState:
		fmt.Fprintf(&b, " %s through=%d", o.Reducer, o.Through)
	case opRead:
		fmt.Fprintf(&b, " (%d, %d]", o.After, o.Through)
	case opReadTail:
		fmt.Fprintf(&b, " %d", o.Limit)
	case opPresenceSet:
		p := o.Presence
		fmt.Fprintf(&b, " %s at=%d ttl=%v seen=%d {", p.Participant, p.At.UnixMilli(), p.TTL, p.Seen)
		first := true
		for _, k := range sortedKeys(p.Values) {
			if !first {
				b.WriteByte(' ')
			}
			first = false
			fmt.Fprintf(&b, "%s:%s", k, p.Values[k])
		}
		b.WriteByte('}')
	case opPresencePrune:
		for _, f := range o.Fields {
			fmt.Fprintf(&b, " %s.%s", f.Participant, f.Field)
		}
	case opAdvance:
		fmt.Fprintf(&b, " %v", o.Advance)
	case opConsumersAdd:
		b.WriteString(servedString(o.Registry))
	case opConsumersRemove, opConsumerPause, opConsumerResume:
		fmt.Fprintf(&b, " %q", o.Names)
	}
	return b.String()
}

func sessionOf(s string) string { return " " + s }

func eventsString(events []a2redis.Event) string {
	parts := make([]string, len(events))
	for i, e := range events {
		var b strings.Builder
		id := e.ID
		if id == "" {
			id = "_"
		}
		fmt.Fprintf(&b, "%s:%s", id, e.Type)
		if len(e.Payload) > 0 {
			b.WriteString("=" + string(e.Payload))
		}
		for _, t := range e.Targets {
			b.WriteString("->" + t.Consumer)
			if t.Lane != "" {
				b.WriteString("/" + t.Lane)
			}
		}
		if c := e.Cause; c != nil {
			fmt.Fprintf(&b, " cause=%s#%d", refOf(c.Ref()), c.Attempt)
		}
		parts[i] = b.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func servedString(consumers []a2redis.Consumer) string {
	if consumers == nil {
		return ""
	}
	parts := make([]string, len(consumers))
	for i, c := range consumers {
		parts[i] = c.Name
		if c.Log != nil {
			types := "*"
			if c.Log.Types != nil {
				types = strings.Join(c.Log.Types, ",")
			}
			parts[i] += fmt.Sprintf("(log %s %s backfill=%v)", c.Log.Lane, types, c.Log.Backfill)
		}
	}
	return " served=[" + strings.Join(parts, " ") + "]"
}

func refsString(refs []a2redis.HeadRef) string {
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = refOf(r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func sortedKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
