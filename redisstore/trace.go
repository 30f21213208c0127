package redisstore

import (
	"context"
	"unicode/utf8"
)

// The operation names an Observer sees (Operation.Name).
const (
	// OpAppend is Append: Count is the events appended (or replayed).
	OpAppend = "append"
	// OpClaim is ClaimAvailable: Count is the heads claimed.
	OpClaim = "claim"
	// OpClaimNext is ClaimNext: Count is the heads claimed.
	OpClaimNext = "claim_next"
	// OpComplete is CompleteAttempt and CompleteAttempts: Count is the
	// attempts completed.
	OpComplete = "complete"
	// OpCompleteAndClaim is CompleteAndClaim: Count is the attempts
	// completed; Claimed the next heads claimed.
	OpCompleteAndClaim = "complete_and_claim"
	// OpFail is FailAttempt: Count is 1 when the failure was recorded;
	// DeadLettered is 1 when it dead-lettered the head.
	OpFail = "fail"
	// OpRelease is Release: Count is the attempts given back.
	OpRelease = "release"
)

// MaxTraceContext is the longest trace context the store keeps with an
// append's events; a longer one (or one that is not valid UTF-8) is not
// stored.
const MaxTraceContext = 256

// Observer is told about the store's work operations (Config.Observer):
// appends, claims and the settling of attempts. Package a2otel implements
// it with OpenTelemetry spans and metrics. With no observer the store does
// none of this work.
type Observer interface {
	// Begin is called as an operation starts; the operation runs with the
	// context it returns, and calls end once, when it returns.
	Begin(ctx context.Context, op Operation) (context.Context, func(OperationEnd))
	// TraceContext returns the trace context Append stores with the events
	// it writes (conventionally a W3C traceparent of the span in ctx), or
	// "" to store none. An append that stores one takes the general append
	// script rather than the single-event and coalesced fast paths.
	TraceContext(ctx context.Context) string
}

// Operation is a store operation as an Observer sees it begin.
type Operation struct {
	// Name is one of the Op… names.
	Name string
	// Session is the session id; "" for ClaimNext, which picks one.
	Session string
	// Events is the number of events (Append) or attempts (settling
	// operations) it was asked to write; 0 for claims.
	Events int
}

// OperationEnd is how an operation ended.
type OperationEnd struct {
	// Session is the session it worked on (for ClaimNext, the one it
	// claimed from; "" when it claimed nothing).
	Session string
	// Count is what it did (see the Op… names).
	Count int
	// Claimed is the heads CompleteAndClaim claimed next.
	Claimed int
	// DeadLettered is the heads it dead-lettered (FailAttempt, and the
	// lapsed heads a claim dead-lettered instead of claiming).
	DeadLettered int
	// Err is the error it returned.
	Err error
}

// traceArg is the trace context as stored: empty when too long or not
// valid UTF-8.
func traceArg(tc string) string {
	if len(tc) > MaxTraceContext || !utf8.ValidString(tc) {
		return ""
	}
	return tc
}
