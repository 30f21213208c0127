package a2redis

import (
	"errors"
	"fmt"
)

// The errors a2redis returns. Every error the library returns for one of
// these conditions satisfies errors.Is with the matching value; typed errors
// (SupersededError, LayoutError, ArgumentError, ReplicationError) carry the
// details, and a BatchError carries the ids of a batch the store gave up on.
var (
	// ErrPartialDuplicateBatch: some, but not all, of a batch's event ids are
	// already stored in the session (or a completion retry names other ids
	// than the committed one). Nothing was written.
	ErrPartialDuplicateBatch = errors.New("a2redis: batch partially duplicates stored events")

	// ErrSupersededAttempt: the attempt named as a cause no longer owns its
	// cursor's head (a newer attempt claimed it, the cursor moved past it,
	// it was dead-lettered, or the session was cleared). Nothing was written.
	ErrSupersededAttempt = errors.New("a2redis: attempt superseded")

	// ErrSessionCleared: scheduled work whose origin index lies at or below
	// the session's latest clear marker. Nothing was written.
	ErrSessionCleared = errors.New("a2redis: session cleared")

	// ErrLayoutMismatch: the key prefix holds another key layout than this
	// release writes. Point the store at a fresh prefix.
	ErrLayoutMismatch = errors.New("a2redis: key layout mismatch")

	// ErrConsumerMismatch: a consumer declared (Config.Consumers,
	// Store.AddConsumers) unlike the prefix's registered consumer of that
	// name. Typed as *redisstore.ConsumerMismatchError. Nothing was written.
	ErrConsumerMismatch = errors.New("a2redis: consumer declared unlike the registry")

	// ErrTrimmed: a read asked for events the session's log no longer
	// holds: they were trimmed (redisstore.Store.Trim). Bounds say where
	// the retained log starts.
	ErrTrimmed = errors.New("a2redis: events trimmed from the log")

	// ErrRangeGap: a read found the log not contiguous where it must be.
	ErrRangeGap = errors.New("a2redis: gap in the event log")

	// ErrInvalidArgument: a caller argument was rejected before anything was
	// sent to Redis.
	ErrInvalidArgument = errors.New("a2redis: invalid argument")

	// ErrNoEvent: an operation named an index at which the session holds no
	// event.
	ErrNoEvent = errors.New("a2redis: no event at index")

	// ErrUnexpectedReply: Redis answered a script with a reply this release
	// does not understand (a server-side bug or a foreign script).
	ErrUnexpectedReply = errors.New("a2redis: unexpected reply")

	// ErrUnavailable: the server, or the session's cluster slot, cannot
	// serve the command now, and said so without running it: a node still
	// loading its data (LOADING), a cluster without a quorum or a slot
	// without a master (CLUSTERDOWN, MASTERDOWN), a slot being migrated
	// (TRYAGAIN, ASK, or a script reaching a key already moved: "non local
	// key"), another script running long (BUSY), a replica refusing a write
	// (READONLY, NOREPLICAS). The error wraps the server's reply. Nothing
	// was written; every operation may be retried. The store retries it
	// itself (Config.Retries) before returning it.
	ErrUnavailable = errors.New("a2redis: unavailable")

	// ErrRejected: the server answered a write with an error reply that is
	// not a refusal for now (not ErrUnavailable): the request breaks a
	// bound of the server's (a size past its proto-max-bulk-len, a script
	// limit) or meets data it cannot work on (a key of the wrong type).
	// Sending the same request again fails the same way: a BatchError
	// wrapping it does not ask for a resend. The error wraps the reply.
	ErrRejected = errors.New("a2redis: rejected by the server")

	// ErrNotReplicated: a write was applied by the master, but fewer
	// replicas (or AOF fsyncs) than Config.Durability asks for acknowledged
	// it in time, so a failover now may lose it. It is not rolled back.
	// Typed as *ReplicationError.
	ErrNotReplicated = errors.New("a2redis: write not replicated")
)

// ArgumentError describes a rejected argument. It matches
// ErrInvalidArgument with errors.Is.
type ArgumentError struct {
	// Arg names the argument, e.g. "events[3].Type".
	Arg string
	// Problem says what is wrong with it.
	Problem string
}

// Error implements error.
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("a2redis: invalid argument %s: %s", e.Arg, e.Problem)
}

// Is reports whether target is ErrInvalidArgument.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// SupersededError reports an attempt that no longer owns its head. It
// matches ErrSupersededAttempt with errors.Is.
type SupersededError struct {
	// Session is the session id.
	Session string
	// Cause is the attempt that was superseded.
	Cause Cause
}

// Error implements error.
func (e *SupersededError) Error() string {
	return fmt.Sprintf("a2redis: attempt %d of %s at index %d in session %q is superseded",
		e.Cause.Attempt, e.Cause.cursorName(), e.Cause.Index, e.Session)
}

// Is reports whether target is ErrSupersededAttempt.
func (e *SupersededError) Is(target error) bool { return target == ErrSupersededAttempt }

// LayoutError reports a prefix that holds another key layout. It matches
// ErrLayoutMismatch with errors.Is.
type LayoutError struct {
	// Prefix is the key prefix.
	Prefix string
	// Found is the layout recorded under the prefix.
	Found string
	// Want is the layout this release writes.
	Want string
}

// Error implements error.
func (e *LayoutError) Error() string {
	if e.Found == "tagged-1" {
		return fmt.Sprintf("a2redis: key prefix %q holds layout %q, written by the a2 TypeScript package (0.22) or an early build of this module, whose keys this release reads differently (id blocks, chunk pins, compact rows, the ready index): point the store at a fresh prefix (this release writes %q)",
			e.Prefix, e.Found, e.Want)
	}
	return fmt.Sprintf("a2redis: key prefix %q holds layout %q, but this release writes %q: point the store at a fresh prefix",
		e.Prefix, e.Found, e.Want)
}

// Is reports whether target is ErrLayoutMismatch.
func (e *LayoutError) Is(target error) bool { return target == ErrLayoutMismatch }

// ReplicationError reports a write that the master applied but that was not
// acknowledged as durable as Config.Durability asks. It matches
// ErrNotReplicated with errors.Is.
type ReplicationError struct {
	// Replicas is how many replicas had to acknowledge the write.
	Replicas int
	// Acked is how many did (-1 when unknown: the wait itself failed).
	Acked int
	// AOF reports that the write also had to reach the master's
	// append-only file (WAITAOF).
	AOF bool
	// LocalAOF reports that it did (with AOF).
	LocalAOF bool
	// Err is why the wait failed, when it did not just time out.
	Err error
}

// Error implements error.
func (e *ReplicationError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("a2redis: write applied by the master, but waiting for its replication failed: %v", e.Err)
	case e.AOF && !e.LocalAOF:
		return fmt.Sprintf("a2redis: write applied by the master, but not fsynced to its AOF in time (%d of %d replicas acknowledged it)", e.Acked, e.Replicas)
	}
	return fmt.Sprintf("a2redis: write applied by the master, but only %d of %d replicas acknowledged it in time", e.Acked, e.Replicas)
}

// Is reports whether target is ErrNotReplicated.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the wait's own error, if any.
func (e *ReplicationError) Unwrap() error { return e.Err }

// BatchError is the error of an Append, or of a CompleteAttempt returning
// events, that the store gave up on after sending it: the server was
// unavailable, the transport failed (the batch may have been written), the
// caller's context ended, or the write was not replicated — or the server
// rejected it (ErrRejected). It carries the event ids the batch was sent
// with, generated ones included: unless it wraps ErrRejected (Retryable
// reports which), sending the same events again with these ids (see
// WithIDs) writes the batch if no try did, and replays the stored rows if
// one did, so a retry never duplicates. A rejected batch fails the same way
// however often it is sent. It wraps the cause (errors.Is works on it).
type BatchError struct {
	// Session is the session id.
	Session string
	// IDs are the batch's event ids, in request order.
	IDs []string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *BatchError) Error() string {
	if !e.Retryable() {
		return fmt.Sprintf("a2redis: batch of %d events in session %q rejected by the server (sending it again fails the same way): %v",
			len(e.IDs), e.Session, e.Err)
	}
	return fmt.Sprintf("a2redis: batch of %d events in session %q not confirmed (send it again with the same ids to replay it): %v",
		len(e.IDs), e.Session, e.Err)
}

// Retryable reports whether sending the batch again can succeed: false
// when the server rejected it (ErrRejected).
func (e *BatchError) Retryable() bool { return !errors.Is(e.Err, ErrRejected) }

// Unwrap returns the cause.
func (e *BatchError) Unwrap() error { return e.Err }

// WithIDs returns a copy of events with the error's ids filled in, ready to
// be sent again: events[i].ID = IDs[i]. It returns nil when the lengths
// differ (not the batch this error is about).
func (e *BatchError) WithIDs(events []Event) []Event {
	if len(events) != len(e.IDs) {
		return nil
	}
	out := make([]Event, len(events))
	for i, ev := range events {
		ev.ID = e.IDs[i]
		out[i] = ev
	}
	return out
}
